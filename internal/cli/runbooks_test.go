package cli

import (
	"testing"

	"github.com/cdcctl/cdcctl/internal/runbook"
)

func TestMain(m *testing.M) { runbook.Main(m) }

// TestRunbooks runs testdata/script/*.txtar but the databases' runbooks
// (internal/runbook runs those, in a test binary of its own, at the same
// time): what an operator types, against real agent processes.
func TestRunbooks(t *testing.T) {
	others, err := runbook.Others()
	if err != nil {
		t.Fatal(err)
	}
	runbook.Run(t, runbook.OthersPorts, others...)
}
