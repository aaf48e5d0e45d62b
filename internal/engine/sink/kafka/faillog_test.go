package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A burst of failures (a broker fault failing 50 dispatchers) is two log
// lines: the first failure at once, then one summary at the interval's
// end; the next failure after it is logged at once again.
func TestDeliveryFailuresAreLoggedOncePerInterval(t *testing.T) {
	var out SyncBuffer
	l := newFailureLog(slog.New(slog.NewTextHandler(&out, nil)), 200*time.Millisecond)
	for i := range 50 {
		l.failed(fmt.Sprintf("p%d", i%20), 1, true, errors.New("NOT_ENOUGH_REPLICAS"))
	}
	if n := len(out.lines()); n != 1 {
		t.Fatalf("%d lines during the burst, want 1: %q", n, out.lines())
	}
	time.Sleep(400 * time.Millisecond)
	lines := out.lines()
	if len(lines) != 2 || !strings.Contains(lines[1], "failures=49") || !strings.Contains(lines[1], "dispatchers=20") {
		t.Fatalf("after the interval: %q", lines)
	}
	l.failed("p1", 2, true, errors.New("again"))
	l.close()
	if lines := out.lines(); len(lines) != 3 || !strings.Contains(lines[2], "dispatcher=p1") {
		t.Fatalf("a failure after the interval: %q", lines)
	}
}
