package playground

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is one agent process the playground started, and how it ended.
type child struct {
	Capture
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

func startAgent(cfg Config, dir, etcdEndpoint string, i int, sec *secure) (*child, error) {
	id := fmt.Sprintf("capture-%d", i)
	logPath := filepath.Join(dir, id+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	c := &child{Capture: Capture{ID: id, Address: addr(cfg.PortBase + i), Log: logPath}, exited: make(chan struct{})}
	cmd := exec.Command(cfg.Agent.Path,
		"--node-id", id,
		"--addr", c.Address,
		"--etcd", etcdEndpoint,
		"--data-dir", filepath.Join(dir, id),
		"--session-ttl", cfg.SessionTTL.String(),
		"--sink-root", sinkRoot(cfg, dir),
	)
	if sec != nil {
		cmd.Args = append(cmd.Args, sec.agentArgs(id)...)
	}
	if cfg.FollowTablesEvery > 0 {
		cmd.Args = append(cmd.Args, "--follow-tables-every", cfg.FollowTablesEvery.String())
	}
	cmd.Args[0] = cfg.Agent.Argv0
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = agentEnv()
	if cfg.ElectionDSN != "" {
		// In the environment, not argv: ps shows argv to everyone.
		cmd.Env = append(cmd.Env, "CDC_AGENT_ELECTION=mysql", "CDC_AGENT_ELECTION_DSN="+cfg.ElectionDSN)
	}
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s with %s: %w", id, cfg.Agent.Path, err)
	}
	c.cmd, c.PID = cmd, cmd.Process.Pid
	go func() {
		c.err = cmd.Wait()
		logFile.Close()
		close(c.exited)
	}()
	return c, nil
}

// agentEnv drops CDC_AGENT_* settings of the operator's shell, which would
// otherwise bend the playground's agents (flags win, but not for all keys).
func agentEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CDC_AGENT_") {
			env = append(env, kv)
		}
	}
	return env
}

// waitReady waits until every agent answers and the cluster has a
// coordinator; an agent that dies first fails the start with its log.
func waitReady(ctx context.Context, children []*child, timeout time.Duration, sec *secure) error {
	var addrs []string
	for _, c := range children {
		addrs = append(addrs, c.Address)
	}
	client, err := newClient(sec, addrs, 2*time.Second)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		for _, c := range children {
			select {
			case <-c.exited:
				return fmt.Errorf("%s exited while starting: %v\n%s", c.ID, describeExit(c.err), tail(c.Log, 15))
			default:
			}
		}
		if st, err := client.Status(ctx); err == nil && st.Coordinator != "" && st.Alive == len(children) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the playground's agents were not ready after %s; see the logs in %s", timeout, filepath.Dir(children[0].Log))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func stopAll(children []*child, out io.Writer) {
	var wg sync.WaitGroup
	for _, c := range children {
		select {
		case <-c.exited:
			continue
		default:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-c.exited:
			case <-time.After(15 * time.Second):
				fmt.Fprintf(out, "%s (pid %d) did not stop within 15s; killing it\n", c.ID, c.PID)
				_ = c.cmd.Process.Kill()
				<-c.exited
			}
		}()
	}
	wg.Wait()
	if len(children) > 0 {
		fmt.Fprintln(out, "playground stopped")
	}
}

func describeExit(err error) string {
	if err == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.String()
	}
	return err.Error()
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "  " + strings.Join(all, "\n  ")
}
