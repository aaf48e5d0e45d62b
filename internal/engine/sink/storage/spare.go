package storage

import (
	"bytes"
	"slices"
	"sync"
	"time"
)

// spareBuffers keeps the encoding buffers of data files already written
// for the next batches to encode into. A new buffer of a batch's size
// (about a megabyte for 4,096 rows) is cleared by the runtime and its
// pages faulted in; in the MySQL streaming benchmark that was a fifth of
// the sink's CPU. Only buffers of useful sizes are kept, at most
// spareBytes of them (a sync.Pool lost them to every garbage collection,
// which a busy sink runs every few milliseconds), and none longer than
// spareIdle unused: the spool counts no spare buffer, and a node of
// many changefeeds whose sinks once caught up kept spareBytes for each
// of them for good.
type spareBuffers struct {
	now func() time.Time // the sink's clock

	mu    sync.Mutex
	bufs  []spareBuffer // the most recently given last
	bytes int
}

type spareBuffer struct {
	b  []byte
	at time.Time // given back
}

const (
	spareMin   = 64 << 10
	spareMax   = 16 << 20
	spareBytes = 32 << 20
	// spareIdle is how long a spare buffer is kept unused: a busy sink
	// takes its buffers back within a flush interval.
	spareIdle = 10 * time.Second
)

// put gives a buffer no one reads any more.
func (p *spareBuffers) put(b []byte) {
	c := cap(b)
	if c < spareMin || c > spareMax {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bytes+c <= spareBytes {
		p.bufs = append(p.bufs, spareBuffer{b: b[:0], at: p.now()})
		p.bytes += c
	}
}

// take returns a spare buffer of n to 2n bytes' capacity, or nil: a
// larger one would be copied out again (appendDir keeps no buffer more
// than twice its bytes, which the spool counts).
func (p *spareBuffers) take(n int) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.bufs) - 1; i >= 0; i-- {
		if b := p.bufs[i].b; cap(b) >= n && cap(b) <= 2*n {
			// Out of the order kept: expire drops the oldest first.
			p.bufs = slices.Delete(p.bufs, i, i+1) // cleared: no reference kept
			p.bytes -= cap(b)
			return b
		}
	}
	return nil
}

// expire lets go of the buffers unused for spareIdle.
func (p *spareBuffers) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.bufs) == 0 {
		return
	}
	cut := p.now().Add(-spareIdle)
	n := 0
	for n < len(p.bufs) && p.bufs[n].at.Before(cut) {
		p.bytes -= cap(p.bufs[n].b)
		n++
	}
	p.bufs = slices.Delete(p.bufs, 0, n)
}

// held is the bytes of the buffers kept.
func (p *spareBuffers) held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bytes
}

// grow makes room for n more bytes in buf, from a spare buffer if one
// is large enough, keeping what buf holds.
func (p *spareBuffers) grow(buf *bytes.Buffer, n int) {
	want := buf.Len() + n
	if want < spareMin {
		buf.Grow(n)
		return
	}
	if b := p.take(want); b != nil {
		*buf = *bytes.NewBuffer(append(b, buf.Bytes()...))
		return
	}
	// An eighth more, so that the next batches' estimates, a little
	// larger or smaller, fit the buffer when it comes back.
	rounded := (want + want/8 + 4095) &^ 4095
	*buf = *bytes.NewBuffer(append(make([]byte, 0, rounded), buf.Bytes()...))
}
