package storage

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"gocloud.dev/gcerrors"

	"github.com/cdcctl/cdcctl/internal/engine/bucket"
	"github.com/cdcctl/cdcctl/internal/engine/row"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
)

// maxParallelFlushes bounds concurrent writes to the bucket. A flush
// takes a slot and gives it back when it ends; the flusher does not wait
// for it, so a slow or hung write holds its slot only, never the other
// dispatchers' flushes.
const maxParallelFlushes = 8

// closeGrace is how long Close lets flushes under way finish before it
// cancels them (their batches fail; their dispatchers resume from their
// checkpoints).
const closeGrace = 5 * time.Second

// Sink is the storage sink of one changefeed on one node.
type Sink struct {
	cfg     Config
	bucket  *bucket.Bucket
	log     *slog.Logger
	now     func() time.Time
	metrics Metrics
	budget  *Budget    // nil: only SpoolMaxBytes bounds the spool
	disk    *diskSpool // spool=disk; nil: rows wait in memory
	// staging: spool=bucket, rows wait in their files' own temporary
	// files (staged.go).
	staging bool
	tenure  sink.Tenure // nil: no session to lose (tests, tools)
	// spare holds the encoding buffers of data files already written,
	// for the next batches (spare.go).
	spare spareBuffers
	shut  atomic.Bool // closed, for waiters that do not hold mu
	// ctx ends writes under way when Close gives up waiting for them.
	ctx    context.Context
	cancel context.CancelFunc
	slots  chan struct{} // a flush under way holds one
	jobs   sync.WaitGroup

	mu   sync.Mutex
	cond *sync.Cond
	disp map[string]*dispatcherState
	// due are the dispatchers whose rows wait for a flush (queue.go).
	due     dueQueue
	schemas map[string]time.Time // schema files known to exist, by last use
	// swept is when schemas was last swept of entries past StateTTL.
	swept   time.Time
	spooled int64
	// waiting and queued are the dispatchers with rows waiting for a
	// flush (bytes > 0) and those rows' bytes: the fanout caps.
	waiting int
	queued  int64
	// spool admits writes while what they hold fits under SpoolMaxBytes
	// (room.go). It counts a write from its admission, spooled from when
	// its rows are added under s.mu: Close gives back spooled, and a
	// write admitted but refused (closed, fenced) gives back its own.
	spool *room
	// rowBytes estimates a batch's encoded size before it is admitted.
	rowBytes rowSize
	closed   bool
	// pressure: a write waits for spool space; the next flush round
	// writes every dispatcher with rows, due or not.
	pressure bool

	wake chan struct{}
	stop chan struct{}
	done chan struct{}

	// Exactly-once delivery (progress.go): the changefeed's incarnation
	// and the dispatchers resumed here.
	changefeed string
	resumed    map[string]*resumed
	// notes: most flushes note their progress on their files (notes.go),
	// while notesNow allows (Env.Notes).
	notes    bool
	notesNow func() bool
}

// dirBuffer is a directory's next data file: the encoded rows of the
// batches written since the last flush, kept as the batches' own buffers
// (chunks). Appending them into one buffer would copy every row again
// and, as the buffer doubles, hold up to twice the spool.
type dirBuffer struct {
	dir    string
	buf    bytes.Buffer // the batch being encoded
	chunks [][]byte
	// extents replace chunks in a disk spool, staged in spool=bucket.
	extents []extent
	staged  *bucket.Staged
	// the first event of the directory, for its schema file
	first row.Event
}

type dispatcherState struct {
	id          string
	bufs        []*dirBuffer
	bytes       int64
	pending     []*sink.Batch
	since       time.Time // arrival of the oldest unflushed row
	seq         uint64    // batches written
	flushedSeq  uint64    // batches whose flush finished (ok or not)
	failedSeq   uint64    // last batch whose flush failed
	failure     error
	flushWanted bool
	flushReason string // why flushWanted: forced or ddl
	flushing    bool
	nextIndex   map[string]uint64 // per directory, once known
	lastWrite   time.Time
	// active: counted in Metrics.ActiveTables (rows buffered or being
	// written).
	active bool
	// resumed is set when the sink writes the dispatcher's progress
	// (exactly once).
	resumed *resumed
	// appending counts the writes appending to its staged files
	// (spool=bucket): no flush takes its files meanwhile. stageMu keeps
	// two such writes apart; requeue says a flush round passed it over;
	// orphans are staged files dropped meanwhile, for the last of them
	// to discard (staged.go).
	appending int
	stageMu   sync.Mutex
	requeue   bool
	orphans   []*dirBuffer
}

// Env is what a storage sink shares with the node that opens it.
type Env struct {
	// Metrics receives its counts; nil: nowhere.
	Metrics Metrics
	// Budget, if set, bounds the bytes every sink sharing it holds.
	Budget *Budget
	// Tenure, if set, is asked before every upload attempt (a data file,
	// its index, a schema file).
	Tenure sink.Tenure
	// Now is the sink's clock (flush ages, date directories); nil:
	// time.Now.
	Now func() time.Time
	// SpoolDir is where a disk spool goes when its URI names no
	// spool-dir (the agent's data directory); "": the system's
	// temporary directory.
	SpoolDir string
	// Changefeed names the changefeed's incarnation: progress objects
	// of another one (a changefeed created again at the same place) are
	// not resumed after.
	Changefeed string
	// Notes, if set, is asked before an exactly-once flush leaves only
	// notes on its data files instead of writing the progress object:
	// false while a node that resumes from the progress object alone
	// (an earlier version, in a rolling upgrade) could take the
	// dispatcher over after a crash and write its noted rows again.
	// nil: notes whenever the bucket keeps them.
	Notes func() bool
}

// Open opens the bucket of a sink URI and starts the sink's flusher.
func Open(ctx context.Context, uri string, log *slog.Logger) (*Sink, error) {
	return OpenWith(ctx, uri, log, Env{})
}

// OpenWith is Open with what the node shares.
func OpenWith(ctx context.Context, uri string, log *slog.Logger, env Env) (*Sink, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	return OpenConfig(ctx, cfg, log, env)
}

// OpenConfig is OpenWith with a parsed configuration.
func OpenConfig(ctx context.Context, cfg Config, log *slog.Logger, env Env) (*Sink, error) {
	bucket, err := OpenBucket(ctx, cfg)
	if err != nil {
		return nil, err
	}
	m := env.Metrics
	if m == nil {
		m = noMetrics{}
	}
	if env.Now == nil {
		env.Now = time.Now
	}
	var disk *diskSpool
	if cfg.Spool == SpoolBucket {
		if !bucket.Stages() {
			bucket.Close()
			return nil, fmt.Errorf("storage sink: spool=bucket needs a file:// bucket")
		}
		env.Budget = nil // the rows are on disk, not in memory
	}
	if cfg.Spool == SpoolDisk {
		if cfg.SpoolDir == "" {
			cfg.SpoolDir = cmp.Or(env.SpoolDir, os.TempDir())
		}
		disk, err = openDiskSpool(cfg.SpoolDir, max(1<<20, min(64<<20, cfg.SpoolMaxBytes/16)), m)
		if err != nil {
			bucket.Close()
			return nil, fmt.Errorf("storage sink: %w", err)
		}
		// The node's budget is memory; these rows are on disk.
		env.Budget = nil
	}
	wctx, cancel := context.WithCancel(context.Background())
	s := &Sink{
		disk: disk, staging: cfg.Spool == SpoolBucket,
		cfg: cfg, bucket: bucket, log: log, now: env.Now, metrics: m, budget: env.Budget, tenure: env.Tenure, ctx: wctx, cancel: cancel,
		slots: make(chan struct{}, maxParallelFlushes),
		disp:  map[string]*dispatcherState{}, schemas: map[string]time.Time{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		changefeed: env.Changefeed, resumed: map[string]*resumed{},
		notes: cfg.ExactlyOnce() && bucket.KeepsNotes(ctx), notesNow: env.Notes,
	}
	s.cond = sync.NewCond(&s.mu)
	s.spare.now = env.Now
	s.spool = newRoom(cfg.SpoolMaxBytes, func() {
		s.mu.Lock()
		s.pressure = true
		s.mu.Unlock()
		s.wakeFlusher()
	})
	if s.budget != nil {
		s.budget.join(s)
	}
	go s.runFlusher()
	return s, nil
}

// Probe opens a sink as a new changefeed's would and closes it again, to
// prove that its bucket can be reached. A failed probe leaves nothing on
// the local disk; after one that passed, undo removes what it created
// there (a file:// sink's directory and its missing parents, if still
// empty), for a create refused later on.
func Probe(ctx context.Context, uri string, log *slog.Logger, env Env) (undo func(), err error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	var created []string
	if u, err := url.Parse(cfg.BucketURL); err == nil && u.Scheme == "file" {
		created = missingDirs(u.Path)
	}
	s, err := OpenConfig(ctx, cfg, log, env)
	if err != nil {
		removeDirs(created)
		return nil, err
	}
	_ = s.Close()
	return func() { removeDirs(created) }, nil
}

// OpenBucket opens a sink's bucket and checks that it can be used.
func OpenBucket(ctx context.Context, cfg Config) (*bucket.Bucket, error) {
	b, err := bucket.Open(ctx, cfg.BucketURL)
	if err != nil {
		return nil, fmt.Errorf("storage sink: %w; check the bucket name, endpoint and credentials", err)
	}
	return b, nil
}

func (s *Sink) wakeFlusher() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Flush implements sink.Sink.
func (s *Sink) Flush(ctx context.Context, dispatcher string) error {
	return s.flushNow(ctx, dispatcher, ReasonForced)
}

// FlushForDDL implements sink.BarrierFlusher: a Flush counted as "ddl".
func (s *Sink) FlushForDDL(ctx context.Context, dispatcher string) error {
	return s.flushNow(ctx, dispatcher, ReasonDDL)
}

// flushNow writes a dispatcher's rows at once and waits for them; reason
// is what the flush is counted as.
func (s *Sink) flushNow(ctx context.Context, dispatcher, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.disp[dispatcher]
	if d == nil {
		return nil
	}
	if err := s.fencedErr(dispatcher); err != nil {
		return err
	}
	target, from := d.seq, d.flushedSeq+1
	if !d.flushWanted || reason == ReasonDDL {
		d.flushReason = reason
	}
	d.flushWanted = true
	s.due.urge(d)
	s.wakeFlusher()
	if err := sink.WaitCond(ctx, s.cond, func() bool { return d.flushedSeq >= target }, s.closedErr); err != nil {
		return err
	}
	if d.failedSeq >= from {
		return d.failure
	}
	return nil
}

// Close stops the flusher. Batches not yet flushed are failed: their
// dispatchers resume from their checkpoints.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.shut.Store(true)
	s.cond.Broadcast()
	s.mu.Unlock()
	if s.budget != nil {
		s.budget.leave(s)
	}
	close(s.stop) // writers waiting for room give up
	<-s.done
	ended := make(chan struct{})
	go func() { s.jobs.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(closeGrace):
		s.cancel()
		<-ended
	}
	s.cancel()
	s.mu.Lock()
	var failed []*sink.Batch
	for _, d := range s.disp {
		failed = append(failed, d.pending...)
		d.pending = nil
		s.dropLocked(d, d.bufs) // or the write appending to them will
		d.bufs = nil
		if d.active {
			d.active = false
			s.metrics.ActiveTables(-1)
		}
	}
	s.metrics.Backlog(-s.spooled, 0)
	held := s.spooled
	s.spooled = 0
	s.mu.Unlock()
	if s.disk != nil {
		if err := s.disk.close(); err != nil {
			s.log.Warn("storage sink: "+err.Error(), "err", err)
		}
	}
	s.spool.give(held)
	if s.budget != nil {
		s.budget.release(held)
	}
	for _, b := range failed {
		if b.OnFlushed != nil {
			b.OnFlushed(errors.New("storage sink closed before the batch was flushed"))
		}
	}
	return s.bucket.Close()
}

var (
	_ sink.Sink           = (*Sink)(nil)
	_ sink.BarrierFlusher = (*Sink)(nil)
)

// urge has the flusher write everything held now (a node budget is
// short).
func (s *Sink) urge() {
	s.mu.Lock()
	if s.spooled > 0 {
		s.pressure = true
		s.wakeFlusher()
	}
	s.mu.Unlock()
}

// closedNow is closedErr for a caller that does not hold s.mu.
func (s *Sink) closedNow() error {
	if s.shut.Load() {
		return errSinkClosed
	}
	return nil
}

// errSinkClosed fails what a closed sink is asked.
var errSinkClosed = errors.New("storage sink is closed")

// closedErr tells a waiting caller the sink closed; the caller holds s.mu.
func (s *Sink) closedErr() error {
	if s.closed {
		return errSinkClosed
	}
	return nil
}

func isNotFound(err error) bool { return gcerrors.Code(err) == gcerrors.NotFound }
