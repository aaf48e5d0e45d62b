package agent

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// logTail keeps what a test's agents logged, so that a failing test (in
// CI above all, where nothing else survives) prints why: every warning,
// and the last lines of everything else.
type logTail struct {
	mu    sync.Mutex
	warns []string
	lines []string // a ring of the last maxTail lines
	next  int
	total int
}

const (
	maxTail  = 300
	maxWarns = 200
)

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			if len(l.warns) < maxWarns {
				l.warns = append(l.warns, line)
			}
		}
		if len(l.lines) < maxTail {
			l.lines = append(l.lines, line)
		} else {
			l.lines[l.next] = line
		}
		l.next = (l.next + 1) % maxTail
		l.total++
	}
	return len(p), nil
}

// dump writes the tail to the test's log.
func (l *logTail) dump(t testing.TB) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b bytes.Buffer
	b.WriteString("the agents' warnings:\n")
	for _, w := range l.warns {
		b.WriteString(w + "\n")
	}
	b.WriteString("the agents' last log lines:\n")
	start := 0
	if len(l.lines) == maxTail {
		start = l.next
	}
	for i := range len(l.lines) {
		b.WriteString(l.lines[(start+i)%len(l.lines)] + "\n")
	}
	t.Logf("%s(%d lines logged in all; CDCCTL_TEST_LOG=1 prints them all)", b.String(), l.total)
}

// testLogger logs the agents of one test at info level into a tail that
// is printed if the test fails, or everything to stderr with
// CDCCTL_TEST_LOG set.
func testLogger(t testing.TB) *slog.Logger {
	if l := verboseLogger(); l != nil {
		return l
	}
	tail := &logTail{}
	t.Cleanup(func() {
		if t.Failed() {
			tail.dump(t)
		}
	})
	return slog.New(slog.NewTextHandler(tail, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
