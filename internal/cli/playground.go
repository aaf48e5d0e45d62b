package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// newPlaygroundCommand starts 'cdc-agent playground' in this process's
// place: the playground runs etcd and agents, which this tool does not
// link. Its flags are cdc-agent's ('cdcctl playground --help' shows
// them), completed by asking cdc-agent.
func newPlaygroundCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "playground [flags]",
		Short: "Run a local cluster: embedded etcd and N cdc-agent processes on loopback (runs 'cdc-agent playground')",
		Long: `Run a local cluster in the foreground: 'cdc-agent playground' with these
arguments, from the cdc-agent next to cdcctl or on the PATH (build both with
'go build -o bin/ ./cmd/...'; from a clone, 'go run ./cmd/cdc-agent playground'
does the same). 'cdcctl playground --help' shows its flags.`,
		Example: `  cdcctl playground
  cdcctl playground --postgres
  cdcctl playground --nodes 5 --port-base 9300 --dir /tmp/pg`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := findAgentBinary()
			if err != nil {
				return err
			}
			// In its place: the same process id, terminal and signals
			// (Ctrl-C stops the playground; scripts kill the pid that
			// playground.json names). Named cdcctl: its help then
			// reads "cdcctl playground [flags]", the command typed.
			err = syscall.Exec(path, append([]string{"cdcctl", "playground"}, args...), os.Environ())
			return fmt.Errorf("start %s playground: %w", path, err)
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			path, err := findAgentBinary()
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return agentCompletions(path, append(append([]string{"playground"}, args...), toComplete))
		},
	}
}

// findAgentBinary is the cdc-agent next to this executable, or the first
// on the PATH.
func findAgentBinary() (string, error) {
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), "cdc-agent")
		if fi, err := os.Stat(beside); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return beside, nil
		}
	}
	path, err := exec.LookPath("cdc-agent")
	if err != nil {
		return "", errors.New("cdcctl playground runs 'cdc-agent playground', and no cdc-agent is next to cdcctl or on the PATH: build both with 'go build -o bin/ ./cmd/...' and run bin/cdcctl playground, or run 'go run ./cmd/cdc-agent playground' from a clone")
	}
	return path, nil
}

// agentCompletions asks cdc-agent's own completion (cobra's hidden
// __complete command) and passes its answer on.
func agentCompletions(path string, args []string) ([]cobra.Completion, cobra.ShellCompDirective) {
	cmd := exec.Command(path, append([]string{cobra.ShellCompRequestCmd}, args...)...)
	cmd.Args[0] = "cdc-agent"
	var out bytes.Buffer
	cmd.Stdout = &out
	if cmd.Run() != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var comps []cobra.Completion
	directive := cobra.ShellCompDirectiveDefault
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if d, ok := strings.CutPrefix(line, ":"); ok {
			if n, err := strconv.Atoi(d); err == nil {
				directive = cobra.ShellCompDirective(n)
			}
			continue
		}
		if line != "" && !strings.HasPrefix(line, "Completion ended") {
			comps = append(comps, line)
		}
	}
	return comps, directive
}
