package storage

// This file notes a flush's progress on its data files, where the bucket
// keeps notes on its objects (bucket.Options.Note: object metadata, or an
// extended attribute on a file system). Exactly once with a progress
// object written before every flush costs three writes for a flush of
// two (data file and index): with a file per flush, a third of the
// sink's throughput. So a flush that follows one of its writer's
// progress objects, into the same directories, writes no object: each
// of its data files carries the note that the object's intent would
// have held (where its rows reach, all of the flush's files), and the
// file appears with its note or not at all. The next owner reads the
// progress object and then the notes of the files its writer wrote
// after the intent's, in each of its directories, in file order, and
// resumes after the last flush whose files are all there.
//
// A writer writes its progress object again when a flush writes a
// directory the object does not name (a new table version, a new date
// directory), after a failed flush (its files' numbering is read back),
// when a new owner resumed the partition, and after progressEvery noted
// flushes, so a resume reads a few notes, not the files of a day.

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/bucket"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
)

// progressEvery is how many flushes a writer notes on their files before
// it writes its progress object again.
const progressEvery = 16

// maxFollow bounds the files a resume reads the notes of in one
// directory: a writer that noted more (a transaction of thousands of
// parts, none of them a place to resume) is resumed after what it read,
// which is earlier than its last flush, never later.
const maxFollow = 1024

// flushNote is the note on a flush's data files.
type flushNote struct {
	Changefeed string `json:"changefeed"`
	Dispatcher string `json:"dispatcher"`
	// Flush numbers the writer's flushes since its progress object,
	// from 1.
	Flush int `json:"flush"`
	// End is where the flush's rows reach; nil when its last batch ends
	// where one cannot resume (inside a transaction in parts, a snapshot
	// chunk).
	End   *sink.Position `json:"end,omitempty"`
	Files []string       `json:"files"`
}

// record tells the bucket, before a flush's data files, what they will
// hold: a note to write on each of them ("" for none), or the progress
// object's intent, written here.
func (s *Sink) record(ctx context.Context, d *dispatcherState, batches []*sink.Batch, files []string) (string, error) {
	s.mu.Lock()
	r := d.resumed
	var recorded, known bool
	var chain int
	if r != nil {
		recorded, chain, known = r.recorded, r.chain, r.knows(files)
	}
	s.mu.Unlock()
	if r == nil || len(batches) == 0 {
		return "", nil
	}
	last := batches[len(batches)-1]
	if s.notes && s.notesAllowed() && recorded && (last.Inside || known && chain < progressEvery) {
		n := flushNote{Changefeed: s.changefeed, Dispatcher: d.id, Flush: chain + 1, Files: files}
		if !last.Inside {
			n.End = &last.End
		}
		body, err := json.Marshal(n)
		if err != nil {
			return "", err
		}
		if bucket.NoteFits(string(body)) {
			s.mu.Lock()
			r.chain++
			s.mu.Unlock()
			return string(body), nil
		}
	}
	if last.Inside {
		// Neither a note nor the object: the files of this flush break
		// the chain of notes a resume follows (the notes are off while a
		// node of an earlier version runs, or the note was too large).
		// Were a later flush noted, a resume would stop here and write
		// the rows of the noted files after it again: the next flush
		// that can be resumed from writes the object first.
		s.mu.Lock()
		r.recorded = false
		s.mu.Unlock()
		return "", nil
	}
	return "", s.writeIntent(ctx, d, r, last, files)
}

// notesAllowed says whether every node that may resume this sink's
// dispatchers reads notes (Env.Notes).
func (s *Sink) notesAllowed() bool { return s.notesNow == nil || s.notesNow() }

// knows says whether every file is in a directory of the writer's
// progress object; s.mu is held.
func (r *resumed) knows(files []string) bool {
	for _, f := range files {
		if !r.dirs[path.Dir(f)] {
			return false
		}
	}
	return true
}

func dirsOf(files []string) map[string]bool {
	out := make(map[string]bool, len(files))
	for _, f := range files {
		out[path.Dir(f)] = true
	}
	return out
}

// follow reads on from a progress object whose intent's files are all
// there: the notes of the files its writer wrote after them. It returns
// where the writer's durable flushes reach, and the last of their files
// in each directory, which the directory's index must name.
func (s *Sink) follow(ctx context.Context, p *progressObject) (sink.Position, []string, error) {
	at := p.Intent.End
	durable := map[string]string{} // directory: its last durable file
	for _, f := range p.Intent.Files {
		durable[path.Dir(f)] = f
	}
	// Whether or not this node can keep notes itself (s.notes, probed
	// once when the sink opened: a passing failure turned it off for the
	// sink's life): reading a note needs no more than reading its file,
	// and a writer that kept none left a progress object at every flush.
	var err error
	if at, err = s.followNotes(ctx, p, durable); err != nil {
		return sink.Position{}, nil, err
	}
	out := make([]string, 0, len(durable))
	for _, f := range durable {
		out = append(out, f)
	}
	return at, out, nil
}

func (s *Sink) followNotes(ctx context.Context, p *progressObject, durable map[string]string) (sink.Position, error) {
	at := p.Intent.End
	notes := map[int]flushNote{} // by flush: found from any of its files
	there := map[string]bool{}   // files found
	for _, f := range p.Intent.Files {
		dir, base := path.Split(f)
		m := dataFileName.FindStringSubmatch(base)
		if m == nil || m[1] != p.Dispatcher {
			return sink.Position{}, fmt.Errorf("the progress of %s names %s, not a data file of %s: remove the progress object if cdcctl did not write it", p.Dispatcher, f, p.Dispatcher)
		}
		n, _ := strconv.ParseUint(m[2], 10, 64)
		for k := n + 1; k <= n+maxFollow; k++ {
			name := dataFile(strings.TrimSuffix(dir, "/"), p.Dispatcher, k, m[3])
			body, found, err := s.bucket.Note(ctx, name)
			if err != nil {
				return sink.Position{}, fmt.Errorf("read the note of %s: %w", name, err)
			}
			if !found {
				break
			}
			there[name] = true
			var note flushNote
			if json.Unmarshal([]byte(body), &note) != nil || note.Changefeed != s.changefeed || note.Dispatcher != p.Dispatcher || note.Flush < 1 {
				break // not a noted flush of this writer: the chain ends
			}
			notes[note.Flush] = note
		}
	}
	// The flushes, in order: a writer starts one after the last is
	// written whole, so the first with a file missing ends what is
	// durable.
	pending := map[string]string{}
	for i := 1; ; i++ {
		note, ok := notes[i]
		if !ok {
			return at, nil
		}
		for _, f := range note.Files {
			if !there[f] {
				ok, err := s.bucket.Exists(ctx, f) // a directory not probed
				if err != nil {
					return sink.Position{}, fmt.Errorf("look for %s: %w", f, err)
				}
				if !ok {
					// Cut short: its files that are there are written
					// again from at (progress.go).
					return at, s.discard(ctx, p.Dispatcher, note.Files)
				}
				there[f] = true
			}
			pending[path.Dir(f)] = f
		}
		if note.End != nil {
			// Durable up to here, with the flushes before it that ended
			// where one cannot resume.
			at = *note.End
			for dir, f := range pending {
				durable[dir] = f
			}
			clear(pending)
		}
	}
}
