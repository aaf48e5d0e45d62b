package runbook

import "testing"

func TestMain(m *testing.M) { Main(m) }

// TestDatabaseRunbooks runs the runbooks that start a database of their
// own (Databases); internal/cli runs the others at the same time.
func TestDatabaseRunbooks(t *testing.T) {
	Run(t, DatabasesPorts, Databases...)
}
