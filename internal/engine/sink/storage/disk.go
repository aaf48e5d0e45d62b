package storage

// This file is the disk spool (spool=disk): encoded rows wait for their
// flush in local files instead of memory, so a sink can hold a large
// backlog (a slow bucket, a burst over very many tables) with the
// process's memory bounded by what is being encoded and written.
//
// The spool is not a new durability boundary: the checkpoint still moves
// only when a flush has written the rows to the bucket. After a crash the
// spool's files are garbage and the source replays from the checkpoint,
// so nothing is synced to disk and a spool left by a dead process is
// removed by the next sink that opens the same spool-dir.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// diskSpool appends encoded rows to segment files and reads them back
// for their flush. A segment is removed once every row in it has been
// flushed or dropped; rows of many dispatchers share segments, so a
// segment lives as long as its slowest row (at most the flush interval,
// or until a full spool makes every dispatcher flush).
type diskSpool struct {
	dir string
	// created: the spool-dir directories this spool created, deepest
	// first, removed on close if nothing else is in them.
	created []string
	lock    *os.File // flock held while the sink is open
	segMax  int64

	mu   sync.Mutex
	cur  *segment
	open map[*segment]struct{} // segments whose file exists
	seq  int
	disk int64 // bytes in segment files that exist
	// metrics hears of disk's changes.
	metrics Metrics
}

// segment is one append-only file of the spool.
type segment struct {
	f      *os.File
	size   int64 // bytes appended
	live   int64 // appended and not yet released
	sealed bool  // no more appends: removed when live reaches 0
}

// extent is where one chunk of encoded rows lies in the spool.
type extent struct {
	seg    *segment
	off, n int64
}

// spoolPrefix names a sink's directory under spool-dir.
const spoolPrefix = "cdcctl-spool-"

// openDiskSpool makes this sink's directory under dir and removes the
// spools of sinks that are gone (no process holds their lock).
//
// The directories it creates for spool-dir (and its missing parents) are
// removed again when it closes, once empty: a removed changefeed leaves
// nothing of its spool behind.
func openDiskSpool(dir string, segMax int64, m Metrics) (*diskSpool, error) {
	created := missingDirs(dir)
	own, err := makeOwnSpool(dir)
	if err != nil {
		removeDirs(created)
		return nil, err
	}
	lock, err := os.Create(filepath.Join(own, "lock"))
	if err == nil {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err != nil {
		_ = os.RemoveAll(own)
		removeDirs(created)
		return nil, fmt.Errorf("spool-dir %s: cannot lock the sink's spool: %w", dir, err)
	}
	return &diskSpool{dir: own, created: created, lock: lock, segMax: segMax, open: map[*segment]struct{}{}, metrics: m}, nil
}

// makeOwnSpool creates dir if needed and this sink's directory in it. A
// sink of another changefeed closing at the same moment may remove dir
// (it created it, and found it empty) between the two: that is tried
// again.
func makeOwnSpool(dir string) (string, error) {
	for attempt := 0; ; attempt++ {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", fmt.Errorf("spool-dir %s: %w; create it or point spool-dir at a writable directory", dir, err)
		}
		removeDeadSpools(dir)
		own, err := os.MkdirTemp(dir, spoolPrefix)
		if err == nil {
			return own, nil
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt == 2 {
			return "", fmt.Errorf("spool-dir %s: %w; point spool-dir at a writable directory", dir, err)
		}
	}
}

// removeDeadSpools removes the spool directories under dir whose lock
// no process holds: their sinks crashed, and their rows are replayed
// from the checkpoint anyway.
func removeDeadSpools(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), spoolPrefix) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		f, err := os.Open(filepath.Join(p, "lock"))
		if err != nil {
			continue // being created, or not ours
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			_ = os.RemoveAll(p)
		}
		_ = f.Close()
	}
}

// append writes b at the end of the current segment.
func (p *diskSpool) append(b []byte) (extent, error) {
	n := int64(len(b))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil || p.cur.size > 0 && p.cur.size+n > p.segMax {
		if err := p.rotateLocked(); err != nil {
			return extent{}, err
		}
	}
	s := p.cur
	if _, err := s.f.WriteAt(b, s.size); err != nil {
		// A short write leaves garbage past size, which the next append
		// overwrites; nothing refers to it.
		return extent{}, fmt.Errorf("disk spool %s: %w; free space there or use spool=memory", p.dir, err)
	}
	e := extent{seg: s, off: s.size, n: n}
	s.size += n
	s.live += n
	p.grow(n)
	return e, nil
}

// rotateLocked seals the current segment and starts a new one.
func (p *diskSpool) rotateLocked() error {
	if p.cur != nil {
		p.sealLocked(p.cur)
	}
	p.seq++
	f, err := os.OpenFile(filepath.Join(p.dir, fmt.Sprintf("%08d.seg", p.seq)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("disk spool %s: %w; free space there or use spool=memory", p.dir, err)
	}
	p.cur = &segment{f: f}
	p.open[p.cur] = struct{}{}
	return nil
}

func (p *diskSpool) sealLocked(s *segment) {
	s.sealed = true
	if s == p.cur {
		p.cur = nil
	}
	if s.live == 0 {
		p.removeLocked(s)
	}
}

func (p *diskSpool) removeLocked(s *segment) {
	_ = os.Remove(s.f.Name())
	_ = s.f.Close()
	p.grow(-s.size)
	s.f = nil
	delete(p.open, s)
}

// reader reads extents in order. They stay readable until released.
func (p *diskSpool) reader(es []extent) io.Reader {
	rs := make([]io.Reader, 0, len(es))
	for i := 0; i < len(es); i++ {
		e := es[i]
		// Rows appended back to back read as one section.
		for i+1 < len(es) && es[i+1].seg == e.seg && es[i+1].off == e.off+e.n {
			e.n += es[i+1].n
			i++
		}
		rs = append(rs, io.NewSectionReader(e.seg.f, e.off, e.n))
	}
	return io.MultiReader(rs...)
}

// release gives back extents whose rows were flushed or dropped.
func (p *diskSpool) release(es []extent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range es {
		e.seg.live -= e.n
		if e.seg.live == 0 && e.seg.f != nil {
			if e.seg == p.cur {
				// Nothing lives in the current segment: start it over
				// rather than grow a file of dead rows.
				p.grow(-e.seg.size)
				e.seg.size = 0
				_ = e.seg.f.Truncate(0)
			} else if e.seg.sealed {
				p.removeLocked(e.seg)
			}
		}
	}
}

// grow moves the size of the segment files; p.mu is held.
func (p *diskSpool) grow(n int64) {
	p.disk += n
	p.metrics.SpoolDisk(n)
}

// close removes the spool; its rows are the sink's unflushed batches,
// which Close has failed.
func (p *diskSpool) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.open {
		_ = s.f.Close()
		s.f = nil
	}
	p.grow(-p.disk)
	p.open, p.cur = map[*segment]struct{}{}, nil
	err := os.RemoveAll(p.dir)
	_ = p.lock.Close()
	removeDirs(p.created)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the disk spool %s: %w", p.dir, err)
	}
	return nil
}
