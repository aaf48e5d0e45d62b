package storage

// This file is exactly-once delivery on a bucket (delivery=exactly-once).
// A crash leaves a partition's checkpoint behind the data files its
// capture wrote since the last one was persisted; the partition's next
// owner would write those rows again. So each partition keeps a progress
// object, cdcctl-progress/<partition>.json, and its next owner resumes
// after what it records (sink.Resumer).
//
// A flush writes the object first, as an intent: the position its rows
// reach and the data files it is about to write, beside the position of
// the flush before (committed). Then the data files, then their indexes.
// Where the bucket keeps notes on its objects, most flushes write no
// object but note the same on their data files (notes.go): one write
// fewer of three for a small file.
// A data file appears whole or not at all, so the next owner reads the
// object and checks the intent's files: all there, and the flush's rows
// are durable (it resumes after the intent's position, and names the
// files in their indexes if the crash came before); any missing, and
// none of the flush's rows were acknowledged (it resumes after the
// committed position; a file of a flush that wrote several directories
// and crashed between them is then written again, a duplicate).
//
// A bucket cannot fence a writer, as Kafka's producer epochs do: what
// stops a capture that lost its session from writing is the tenure check
// before every upload. An upload it had started before it froze, and
// that lands after its partition resumed elsewhere, is still a
// duplicate.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"gocloud.dev/gcerrors"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
)

// progressDir holds the progress objects, at the root of the sink's
// location: readers list data files under the schema's directory only.
const progressDir = "cdcctl-progress"

func progressFile(partition string) string {
	return path.Join(progressDir, partition+".json")
}

// progressObject is a progress object's content.
type progressObject struct {
	// Changefeed is the incarnation that wrote it.
	Changefeed string `json:"changefeed"`
	Dispatcher string `json:"dispatcher"`
	Epoch      uint64 `json:"epoch"`
	// Committed is where the partition's acknowledged rows reached
	// before the flush the intent describes; nil: nowhere recorded.
	Committed *sink.Position `json:"committed,omitempty"`
	Intent    *flushIntent   `json:"intent,omitempty"`
}

// flushIntent is a flush about to be written: where its rows reach, and
// its data files.
type flushIntent struct {
	End   sink.Position `json:"end"`
	Files []string      `json:"files"`
}

// resumed is what the sink knows of a dispatcher it writes progress for.
type resumed struct {
	partition string
	// committed is the position its acknowledged rows reach (ok false:
	// none recorded yet).
	committed sink.Position
	ok        bool
	// recorded: this writer's progress object is in the bucket, written
	// since its last failed flush; dirs are its files' directories, and
	// chain counts the flushes noted on their data files since
	// (notes.go).
	recorded bool
	dirs     map[string]bool
	chain    int
}

// ExactlyOnce says whether the sink writes progress objects.
func (c Config) ExactlyOnce() bool { return c.Delivery == DeliveryExactlyOnce }

// Resume implements sink.Resumer: with exactly-once delivery, where the
// partition's durable rows reach according to its progress object, if
// this changefeed wrote one.
func (s *Sink) Resume(ctx context.Context, w sink.Writer) (sink.Position, bool, error) {
	if !s.cfg.ExactlyOnce() {
		return sink.Position{}, false, nil
	}
	if err := checkName(w.Partition); err != nil {
		return sink.Position{}, false, err
	}
	if err := s.supersede(ctx, w); err != nil {
		return sink.Position{}, false, err
	}
	at, ok, err := s.lastProgress(ctx, w.Partition)
	if err != nil {
		return sink.Position{}, false, err
	}
	s.mu.Lock()
	r := &resumed{partition: w.Partition, committed: at, ok: ok}
	s.resumed[w.Dispatcher] = r
	if d := s.disp[w.Dispatcher]; d != nil {
		d.resumed = r
	}
	s.mu.Unlock()
	return at, ok, nil
}

// errSuperseded fences a dispatcher whose partition resumed under
// another on this node.
var errSuperseded = errors.New("its partition resumed under a newer dispatcher")

// supersede fences the partition's earlier dispatchers in this sink
// (what they hold is dropped, unwritten, and they write nothing more) and
// waits for a flush of theirs under way to end, so that the progress
// object and the files read next are final: a stop that gave up on a
// slow bucket (after 30 s) left its flush running, and a resume that read
// the progress with that flush's data file on the wire resumed before
// rows that then landed and were acknowledged.
func (s *Sink) supersede(ctx context.Context, w sink.Writer) error {
	s.mu.Lock()
	var dropped []fenced
	var earlier []*dispatcherState
	// By the dispatchers' own records, not s.resumed: a stop cut short
	// forgets its dispatcher (Forget) with its flush still uploading.
	for id, d := range s.disp {
		if id == w.Dispatcher || d.resumed == nil || d.resumed.partition != w.Partition {
			continue
		}
		if d.failure == nil {
			d.failure = errSuperseded
			dropped = append(dropped, s.fenceLocked(d))
		}
		earlier = append(earlier, d)
	}
	s.mu.Unlock()
	for _, f := range dropped {
		s.refuse(f, errSuperseded)
	}
	if len(earlier) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return sink.WaitCond(ctx, s.cond, func() bool {
		for _, d := range earlier {
			if d.flushing {
				return false
			}
		}
		return true
	}, s.closedErr)
}

// lastProgress reads a partition's progress object and decides where its
// durable rows reach.
func (s *Sink) lastProgress(ctx context.Context, partition string) (sink.Position, bool, error) {
	name := progressFile(partition)
	body, err := s.bucket.ReadAll(ctx, name)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return sink.Position{}, false, nil
	}
	if err != nil {
		return sink.Position{}, false, fmt.Errorf("read the progress of %s: %w", partition, err)
	}
	var p progressObject
	if err := json.Unmarshal(body, &p); err != nil {
		return sink.Position{}, false, fmt.Errorf("%s is not a progress object cdcctl wrote (%v): remove it if it is not", name, err)
	}
	if p.Changefeed != s.changefeed {
		// An earlier changefeed's at this place: its rows are not this
		// one's.
		return sink.Position{}, false, nil
	}
	if p.Intent != nil {
		done := true
		for _, f := range p.Intent.Files {
			ok, err := s.bucket.Exists(ctx, f)
			if err != nil {
				return sink.Position{}, false, fmt.Errorf("look for %s: %w", f, err)
			}
			done = done && ok
		}
		if done {
			// The flush's files are all there: its rows are durable, and
			// so may be those of the flushes its writer noted on their
			// files after it. Its writer may have died before naming
			// the last of them in its indexes.
			at, last, err := s.follow(ctx, &p)
			if err != nil {
				return sink.Position{}, false, err
			}
			for _, f := range last {
				if err := s.indexFile(ctx, f, p.Dispatcher); err != nil {
					return sink.Position{}, false, err
				}
			}
			return at, true, nil
		}
	}
	if p.Intent != nil {
		// Some of the flush's files may be there: no index names them
		// (a flush writes its indexes after all its files), none of
		// their rows were acknowledged, and they are written again
		// from the committed position.
		if err := s.discard(ctx, p.Dispatcher, p.Intent.Files); err != nil {
			return sink.Position{}, false, err
		}
	}
	if p.Committed != nil {
		return *p.Committed, true, nil
	}
	return sink.Position{}, false, nil
}

// discard removes those of a flush's files that are there, when one of
// them is not: the next owner writes their rows again, and a reader that
// lists the directory would read them twice. A file its index names is
// left: a reader may have read it (a flush of an earlier version named
// each file in its index before writing the next).
func (s *Sink) discard(ctx context.Context, dispatcher string, files []string) error {
	for _, f := range files {
		there, err := s.bucket.Exists(ctx, f)
		if err != nil {
			return fmt.Errorf("look for %s: %w", f, err)
		}
		if !there {
			continue
		}
		dir, base := path.Split(f)
		body, err := s.bucket.ReadAll(ctx, indexFile(strings.TrimSuffix(dir, "/"), dispatcher))
		if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return fmt.Errorf("read the index of %s: %w", f, err)
		}
		if err == nil && fileNumber(strings.TrimSpace(string(body))) >= fileNumber(base) {
			continue
		}
		if err := s.bucket.Delete(ctx, f); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return fmt.Errorf("remove %s, a file of a flush cut short: %w", f, err)
		}
		s.log.Info("storage sink: removed a file of a flush cut short; its rows are written again", "file", f)
	}
	return nil
}

// indexFile makes the index of a data file's dispatcher in its
// directory name it, unless it names it or a later file already.
func (s *Sink) indexFile(ctx context.Context, file, dispatcher string) error {
	dir, base := path.Split(file)
	idx := indexFile(strings.TrimSuffix(dir, "/"), dispatcher)
	body, err := s.bucket.ReadAll(ctx, idx)
	if err == nil && fileNumber(strings.TrimSpace(string(body))) >= fileNumber(base) {
		return nil
	}
	if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("read %s: %w", idx, err)
	}
	if err := s.bucket.Put(ctx, idx, [][]byte{[]byte(base + "\n")}, false); err != nil {
		return fmt.Errorf("write %s: %w", idx, err)
	}
	return nil
}

// fileNumber is a data file name's number; 0 if it is none.
func fileNumber(base string) uint64 {
	m := dataFileName.FindStringSubmatch(base)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseUint(m[2], 10, 64)
	return n
}

// checkName refuses a partition id that is not one path element.
func checkName(partition string) error {
	if partition == "" || path.Base(partition) != partition || partition == "." || partition == ".." {
		return fmt.Errorf("storage sink: partition id %q cannot name a progress object", partition)
	}
	return nil
}

// writeIntent writes a dispatcher's progress object before its flush's
// data files: the files and where their rows reach. A flush whose last
// batch ends where one cannot resume (inside a transaction returned in
// parts, or a snapshot chunk) writes none: the object stays at the
// flush before, and a crash writes this flush's rows again.
func (s *Sink) writeIntent(ctx context.Context, d *dispatcherState, r *resumed, last *sink.Batch, files []string) error {
	s.mu.Lock()
	p := progressObject{Changefeed: s.changefeed, Dispatcher: d.id, Epoch: last.Epoch, Intent: &flushIntent{End: last.End, Files: files}}
	if r.ok {
		p.Committed = &r.committed
	}
	s.mu.Unlock()
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	name := progressFile(r.partition)
	if err := s.retried(ctx, name, func() error { return s.bucket.Put(ctx, name, [][]byte{body}, false) }); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	s.mu.Lock()
	r.recorded, r.dirs, r.chain = true, dirsOf(files), 0
	s.mu.Unlock()
	return nil
}

// flushed records that a flush's rows are durable: the next intent's
// committed position.
func (s *Sink) flushed(d *dispatcherState, batches []*sink.Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := d.resumed; r != nil && len(batches) > 0 && !batches[len(batches)-1].Inside {
		r.committed, r.ok = batches[len(batches)-1].End, true
	}
}

// Forget implements sink.Forgetter: a dispatcher that is gone needs no
// progress record here.
func (s *Sink) Forget(dispatcher string) {
	s.mu.Lock()
	delete(s.resumed, dispatcher)
	s.mu.Unlock()
}
