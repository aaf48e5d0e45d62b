package playground

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
)

// supervise waits for the playground to be stopped, reporting agents that
// exit; an agent that exits because a rollout asked it to restart is
// started again, as its service manager would, and playground.json names
// its new pid. children is the slice Run stops at its end: a restarted
// agent takes its predecessor's place in it.
func supervise(ctx context.Context, cfg Config, dir, etcdEndpoint string, sec *secure, children []*child, st State) error {
	exits := make(chan int, len(children))
	watch := func(i int) {
		c := children[i]
		go func() {
			<-c.exited
			exits <- i
		}()
	}
	for i := range children {
		watch(i)
	}
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(cfg.Out, "\nstopping the playground...")
			return nil
		case i := <-exits:
			c := children[i]
			if exitCode(c.err) != exitRestart {
				fmt.Fprintf(cfg.Out, "%s (pid %d) exited: %v; the playground does not restart it (log: %s)\n", c.ID, c.PID, describeExit(c.err), c.Log)
				continue
			}
			// A rollout asked it to restart: the playground is its
			// service manager.
			again, err := startAgent(cfg, dir, etcdEndpoint, i+1, sec)
			if err != nil {
				fmt.Fprintf(cfg.Out, "%s exited to restart, and could not be started again: %v\n", c.ID, err)
				continue
			}
			children[i] = again
			st.Captures[i] = again.Capture
			if err := writeState(filepath.Join(dir, "playground.json"), st); err != nil {
				fmt.Fprintf(cfg.Out, "cannot update playground.json: %v\n", err)
			}
			fmt.Fprintf(cfg.Out, "%s (pid %d) exited to restart; started again (pid %d)\n", c.ID, c.PID, again.PID)
			watch(i)
		}
	}
}

// exitRestart is cdc-agent's exit code when a rollout asked it to restart
// (agent.ExitRestart; the playground does not link the agent's package).
const exitRestart = 75

// exitCode is a child's exit code, -1 if it did not exit by itself.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}
