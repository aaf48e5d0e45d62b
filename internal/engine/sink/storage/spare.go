package storage

import (
	"bytes"
	"sync"
)

// spareBuffers keeps the encoding buffers of data files already written
// for the next batches to encode into. A new buffer of a batch's size
// (about a megabyte for 4,096 rows) is cleared by the runtime and its
// pages faulted in; in the MySQL streaming benchmark that was a fifth of
// the sink's CPU. Only buffers of useful sizes are kept, at most
// spareBytes of them (a sync.Pool lost them to every garbage collection,
// which a busy sink runs every few milliseconds).
type spareBuffers struct {
	mu    sync.Mutex
	bufs  [][]byte
	bytes int
}

const (
	spareMin   = 64 << 10
	spareMax   = 16 << 20
	spareBytes = 32 << 20
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
		p.bufs = append(p.bufs, b[:0])
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
		if b := p.bufs[i]; cap(b) >= n && cap(b) <= 2*n {
			last := len(p.bufs) - 1
			p.bufs[i], p.bufs[last] = p.bufs[last], nil
			p.bufs = p.bufs[:last]
			p.bytes -= cap(b)
			return b
		}
	}
	return nil
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
