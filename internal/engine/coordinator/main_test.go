package coordinator_test

import (
	"flag"
	"os"
	"testing"
)

// TestMain runs four of this package's tests at once unless -parallel
// says otherwise (the default is one per core). Each starts a cluster and
// mostly waits on it — session TTLs, flush intervals, plans' steps — so
// two at a time left the package wait-bound: alone on two cores, 147 s
// using 54 s of CPU; four at a time, 80 s using the same CPU. In CI's
// run, beside two other packages, it had taken 290–370 s, past the six
// minutes a package may take.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", "4")
	}
	os.Exit(m.Run())
}
