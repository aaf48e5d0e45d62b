package playground

import (
	"strings"
	"testing"
)

// The banner's "Next" list is two columns: every comment starts at the
// same column, its second line too, whatever the pids' widths and
// whichever demos run; a command too long for the column has its comment
// on the line under it. The comments used to start wherever their
// command ended, the kill line's second line one column off its first.
func TestTheBannersCommentsLineUp(t *testing.T) {
	for _, st := range []State{
		{Server: "127.0.0.1:8301", Dir: "/tmp/pg", Demo: "file:///tmp/pg/sinks/demo",
			Captures: []Capture{{ID: "capture-1", PID: 7}, {ID: "capture-2", PID: 20879}, {ID: "capture-3", PID: 1234567}}},
		{Server: "127.0.0.1:8301", Dir: "/tmp/pg", Demo: "file:///tmp/pg/sinks/demo", CAFile: "/tmp/pg/secure/ca.pem",
			AdminTokenFile: "/tmp/pg/secure/admin.token", ViewerTokenFile: "/tmp/pg/secure/viewer.token",
			Postgres: "postgres://127.0.0.1:8310/shop", DemoPG: "file:///tmp/pg/sinks/demo-pg",
			MySQL: "mysql://root@127.0.0.1:8312/shop?server-id=7", DemoMySQL: "file:///tmp/pg/sinks/demo-mysql", Kafka: "127.0.0.1:8313",
			Captures: []Capture{{ID: "capture-1", PID: 123456}, {ID: "capture-2", PID: 20879}, {ID: "capture-3", PID: 31}}},
	} {
		var b strings.Builder
		printBanner(&b, st)
		next := strings.SplitN(strings.SplitN(b.String(), "Next, in another terminal:\n", 2)[1], "\n\n", 2)[0]
		col := -1
		for _, line := range strings.Split(next, "\n") {
			at := strings.Index(line, " # ")
			if at < 0 {
				continue
			}
			at++
			if col < 0 {
				col = at
			}
			if at != col {
				t.Errorf("a comment at column %d, the first at %d:\n%s", at, col, next)
				break
			}
		}
		if col < 0 {
			t.Fatalf("no comments:\n%s", next)
		}
	}
}
