package cli

import (
	"strings"
	"testing"
)

// run is cdcctl with args, as a user runs it: its exit code and what it
// printed on stderr.
func run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	code := Execute(args, strings.NewReader(""), &stdout, &stderr)
	return code, stderr.String()
}

// --partitions-per-table outside 1..64 is a flag's error (exit 64) that
// names the range, found before any agent is asked (none answers here);
// 0 is refused too: the flag's default is 4, 0 is no way to ask for it.
func TestAPartitionsPerTableOutOfRangeIsAUsageError(t *testing.T) {
	for _, n := range []string{"-1", "0", "65"} {
		code, stderr := run(t, "--server", "127.0.0.1:1", "changefeed", "create", "g3", "--source", "gen://?tables=1", "--sink", "file:///tmp/x", "--partitions-per-table", n)
		if code != ExitUsage || !strings.Contains(stderr, "--partitions-per-table "+n+" is out of range: use 1 to 64 (default 4)") || strings.Contains(stderr, "source and sink URIs") {
			t.Errorf("--partitions-per-table %s: exit %d, want 64:\n%s", n, code, stderr)
		}
	}
}
