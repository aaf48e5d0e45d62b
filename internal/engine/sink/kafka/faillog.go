package kafka

import (
	"log/slog"
	"sync"
	"time"
)

// failureLogInterval is how often the sink logs its dispatchers' delivery
// failures at most: the first of an interval at once, the others of it
// as one summary when it ends. A broker fault fails every dispatcher
// writing to its partitions, each again at every recovery: thousands of
// lines a minute otherwise.
const failureLogInterval = 10 * time.Second

// failureLog aggregates delivery failures per interval.
type failureLog struct {
	log   *slog.Logger
	every time.Duration
	// from is where a failed dispatcher's successor resumes, as the log
	// says it.
	from string

	mu      sync.Mutex
	open    bool // an interval is running
	held    int  // failures since the interval's first
	holders map[string]bool
	last    error
	timer   *time.Timer
}

func newFailureLog(log *slog.Logger, every time.Duration) *failureLog {
	return &failureLog{log: log, every: every, from: "its checkpoint"}
}

// exactlyOnce makes the log say what happens with exactly-once delivery.
func (l *failureLog) exactlyOnce() *failureLog {
	l.from = "its last committed transaction (the open one is aborted)"
	return l
}

// failed records the first failure of a dispatcher epoch.
func (l *failureLog) failed(dispatcher string, epoch uint64, transient bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open {
		l.held++
		if l.holders == nil {
			l.holders = map[string]bool{}
		}
		l.holders[dispatcher] = true
		l.last = err
		return
	}
	l.open = true
	l.log.Warn("kafka sink: delivery failed; the dispatcher's other messages are held back and it is recovered from "+l.from,
		"dispatcher", dispatcher, "epoch", epoch, "transient", transient, "err", err)
	l.timer = time.AfterFunc(l.every, l.flush)
}

// flush ends the interval: a summary of what it held back, if anything.
func (l *failureLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held > 0 {
		l.log.Warn("kafka sink: more deliveries failed; their dispatchers are recovered from their checkpoints",
			"failures", l.held, "dispatchers", len(l.holders), "interval", l.every, "last_err", l.last)
	}
	l.open, l.held, l.holders, l.last = false, 0, nil, nil
}

// close logs what the current interval held back.
func (l *failureLog) close() {
	l.mu.Lock()
	t := l.timer
	l.mu.Unlock()
	if t != nil && t.Stop() {
		l.flush()
	}
}
