package enginetest

import (
	"bytes"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// LogTail keeps what a test's captures logged, so that a failing test (in
// CI above all, where nothing else survives) prints why: every warning,
// and the last lines of everything else.
type LogTail struct {
	mu    sync.Mutex
	warns []string
	lines []string // a ring of the last maxTail lines
	next  int
	total int
	// once counts the events that must happen at most once per
	// identity (countedEvents), so a test can check they did.
	once map[string]int
	// secret, if set, must appear in no line; leaks are the lines that
	// showed it.
	secret string
	leaks  []string
}

// Forbid makes every later line that shows secret a leak.
func (l *LogTail) Forbid(secret string) {
	l.mu.Lock()
	l.secret = secret
	l.mu.Unlock()
}

// Leaked are the lines that showed the forbidden secret.
func (l *LogTail) Leaked() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.leaks...)
}

// Warned reports whether a warning or error logged so far says text.
func (l *LogTail) Warned(text string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.warns {
		if strings.Contains(w, text) {
			return true
		}
	}
	return false
}

// countedEvents are log messages that seed 002 allows once per identity:
// a dispatcher (partition and routing epoch) starts once, and its failure
// asks for one recovery.
var countedEvents = []struct {
	msg string
	id  *regexp.Regexp
}{
	{`msg="dispatcher started"`, regexp.MustCompile(` dispatcher=(\S+)`)},
	{`msg="dispatcher failed; asking its maintainer to recover it"`, regexp.MustCompile(` changefeed=(\S+) partition=(\S+) epoch=(\S+)`)},
}

// Counted returns how often each identity of an event was logged, by
// "node event identity".
func (l *LogTail) Counted() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for k, v := range l.once {
		out[k] = v
	}
	return out
}

var nodeField = regexp.MustCompile(` node=(\S+)`)

const (
	maxTail  = 300
	maxWarns = 200
)

func (l *LogTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if l.secret != "" && strings.Contains(line, l.secret) {
			l.leaks = append(l.leaks, line)
		}
		for _, ev := range countedEvents {
			if !strings.Contains(line, ev.msg) {
				continue
			}
			if m := ev.id.FindStringSubmatch(line); m != nil {
				node := ""
				if n := nodeField.FindStringSubmatch(line); n != nil {
					node = n[1]
				}
				if l.once == nil {
					l.once = map[string]int{}
				}
				l.once[node+" "+ev.msg+" "+strings.Join(m[1:], " ")]++
			}
		}
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
func (l *LogTail) dump(t testing.TB) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b bytes.Buffer
	b.WriteString("the captures' warnings:\n")
	for _, w := range l.warns {
		b.WriteString(w + "\n")
	}
	b.WriteString("the captures' last log lines:\n")
	start := 0
	if len(l.lines) == maxTail {
		start = l.next
	}
	for i := range len(l.lines) {
		b.WriteString(l.lines[(start+i)%len(l.lines)] + "\n")
	}
	t.Logf("%s(%d lines logged in all; CDCCTL_TEST_LOG=1 prints them all)", b.String(), l.total)
}

// Logger logs the captures of one test at info level into a tail that is
// printed if the test fails, or everything to stderr with CDCCTL_TEST_LOG
// set.
func Logger(t testing.TB) (*slog.Logger, *LogTail) {
	tail := &LogTail{}
	if l := VerboseLogger(); l != nil {
		return l, tail
	}
	t.Cleanup(func() {
		if t.Failed() {
			tail.dump(t)
		}
	})
	return slog.New(slog.NewTextHandler(tail, &slog.HandlerOptions{Level: slog.LevelInfo})), tail
}

// VerboseLogger logs everything to stderr when CDCCTL_TEST_LOG is set (to
// debug a test); else it is nil.
func VerboseLogger() *slog.Logger {
	if os.Getenv("CDCCTL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}
