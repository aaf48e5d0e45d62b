package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// rolloutHook is an upgrade's hook ('rollout upgrade --exec', 'plan watch
// --exec'): the command that restarts one capture (a new version, say),
// run by the cdcctl that follows the plan for each capture the plan has
// drained and now waits to see restarted. It runs here, on the operator's
// machine, and only ever as given on this command line: a command stored
// in the cluster is never run.
type rolloutHook struct {
	command string
	timeout time.Duration
	// ran are the captures it ran for in this process: once each.
	ran map[model.NodeID]bool
}

func newRolloutHook(command string, timeout time.Duration) *rolloutHook {
	return &rolloutHook{command: command, timeout: timeout, ran: map[model.NodeID]bool{}}
}

// hookFlags are --exec and --exec-timeout.
type hookFlags struct {
	command string
	timeout time.Duration
}

func (f *hookFlags) register(cmd *cobra.Command, usage string) {
	cmd.Flags().StringVar(&f.command, "exec", "", usage+"; it gets "+hookEnvCapture+", "+hookEnvAddr+", "+hookEnvPID+" and "+hookEnvPlan)
	cmd.Flags().DurationVar(&f.timeout, "exec-timeout", 10*time.Minute, "stop a hook that runs longer than this (the plan is then paused; exit 11)")
}

// hook is the hook the flags give (nil without --exec).
func (f *hookFlags) hook() (*rolloutHook, error) {
	if f.command == "" {
		return nil, nil
	}
	if f.timeout <= 0 {
		return nil, usageErr(fmt.Errorf("--exec-timeout must be positive, got %s", f.timeout))
	}
	return newRolloutHook(f.command, f.timeout), nil
}

// hookEnv names what a hook is given, beside cdcctl's own environment.
const (
	hookEnvCapture = "CDCCTL_CAPTURE"
	hookEnvAddr    = "CDCCTL_CAPTURE_ADDR"
	hookEnvPID     = "CDCCTL_CAPTURE_PID"
	hookEnvPlan    = "CDCCTL_PLAN"
)

// follow runs the hook for each restart step of rec that is running and
// that it has not run for. A hook that fails pauses the plan (nothing new
// begins; the drained capture goes on running) and ends the watch with
// ExitHookFailed and what to do.
func (h *rolloutHook) follow(ctx context.Context, o *options, c *api.Client, rec *exec.Record) error {
	if rec.State.Terminal() {
		return nil
	}
	if rec.Plan.Kind != plan.KindRollout || rec.Plan.RestartBy != plan.RestartByHook {
		return usageErr(fmt.Errorf("plan %s is a %s that runs no hook (only a rollout upgrade does): watch it without --exec", rec.ID, rec.Plan.KindText()))
	}
	for _, s := range rec.Steps {
		step := rec.Step(s)
		if step.Kind != plan.StepRestart || s.State != exec.StepRunning || h.ran[step.To] {
			continue
		}
		h.ran[step.To] = true
		err := h.run(ctx, o, c, rec.ID, step.To)
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		paused := "is paused (nothing new begins)"
		if _, perr := c.RequestPlan(ctx, rec.ID, exec.RequestPause); perr != nil {
			paused = fmt.Sprintf("could not be paused (%v): pause it ('cdcctl plan pause %s')", perr, rec.ID)
		} else if !pausedWithin(ctx, c, rec.ID, 10*time.Second) {
			paused = "was asked to pause (nothing new begins once it is)"
		}
		return withExit(ExitHookFailed, fmt.Errorf("the rollout's hook failed for %s: %w; plan %s %s and %s is drained and still running: fix the hook, then run it again with 'cdcctl plan watch %s --exec CMD' and 'cdcctl plan resume %s' (or restart %s yourself and resume the plan)",
			step.To, err, rec.ID, paused, step.To, rec.ID, rec.ID, step.To))
	}
	return nil
}

// run runs the hook once for capture id, its output on stderr line by
// line under the capture's name.
func (h *rolloutHook) run(ctx context.Context, o *options, c *api.Client, planID string, id model.NodeID) error {
	env := append(os.Environ(), hookEnvCapture+"="+string(id), hookEnvPlan+"="+planID)
	if cp, err := c.Capture(ctx, string(id)); err == nil {
		env = append(env, hookEnvAddr+"="+cp.Address, hookEnvPID+"="+strconv.Itoa(cp.PID))
	}
	hctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	cmd := osexec.CommandContext(hctx, "/bin/sh", "-c", h.command)
	cmd.Env = env
	ownGroup(cmd)
	// A hook that leaves a process behind holding its output (a service
	// started by hand) is not waited for beyond a second.
	cmd.WaitDelay = time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var lines sync.WaitGroup
	lines.Add(1)
	go func() {
		defer lines.Done()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintf(o.errOut, "hook %s: %s\n", id, sc.Text())
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	fmt.Fprintf(o.errOut, "%s hook: restarting %s: %s\n", time.Now().Local().Format("15:04:05"), id, h.command)
	began := time.Now()
	err := cmd.Run()
	if errors.Is(err, osexec.ErrWaitDelay) {
		err = nil
	}
	_ = pw.Close()
	lines.Wait()
	took := time.Since(began).Round(time.Millisecond)
	switch {
	case hctx.Err() == context.DeadlineExceeded && ctx.Err() == nil:
		return fmt.Errorf("it ran longer than --exec-timeout %s and was stopped", h.timeout)
	case err != nil:
		var ee *osexec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("it exited with status %d after %s", ee.ExitCode(), took)
		}
		return err
	}
	fmt.Fprintf(o.errOut, "%s hook: done for %s in %s; the plan waits for it to rejoin as a new incarnation\n", time.Now().Local().Format("15:04:05"), id, took)
	return nil
}

// pausedWithin waits until the coordinator has taken a pause request
// (it applies requests in its own loop), so that what the hook's failure
// says of the plan is true when it is said.
func pausedWithin(ctx context.Context, c *api.Client, id string, d time.Duration) bool {
	for end := time.Now().Add(d); ; {
		if p, err := c.Plan(ctx, id); err == nil && p.State == exec.Paused {
			return true
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}
