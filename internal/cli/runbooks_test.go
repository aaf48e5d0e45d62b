package cli

import (
	"slices"
	"testing"

	"github.com/cdcctl/cdcctl/internal/runbook"
)

func TestMain(m *testing.M) { runbook.Main(m) }

// TestRunbooks runs testdata/script/*.txtar but the databases' runbooks
// (internal/runbook runs those, in a test binary of its own, at the same
// time): what an operator types, against real agent processes.
func TestRunbooks(t *testing.T) {
	all, err := runbook.All()
	if err != nil {
		t.Fatal(err)
	}
	all = slices.DeleteFunc(all, func(n string) bool { return slices.Contains(runbook.Databases, n) })
	runbook.Run(t, [2]int{20000, 26000}, all...)
}
