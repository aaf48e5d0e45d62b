package row

import "unsafe"

// Arena hands out the strings and value slices of many rows from blocks,
// each twice the last up to a limit (a few rows take a small one): a
// read or a snapshot chunk of thousands of rows then makes a few
// allocations, not one per row and value (each was a large share of
// their CPU). A block is only ever appended to, so a string made over its
// bytes never changes; a value slice is cut with its capacity at its
// length, so appending to it copies instead of reaching a neighbour. The
// zero value is ready; an Arena is for one goroutine.
type Arena struct {
	buf  []byte
	vals []Value
}

const (
	arenaBytes  = 64 << 10
	arenaValues = 1024
)

// String returns b as a string from the arena's block.
func (a *Arena) String(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > arenaBytes/8 {
		return string(b) // a large value: its own allocation
	}
	if cap(a.buf)-len(a.buf) < len(b) {
		a.buf = make([]byte, 0, max(min(2*cap(a.buf), arenaBytes), 1024, len(b)))
	}
	at := len(a.buf)
	a.buf = append(a.buf, b...)
	return unsafe.String(&a.buf[at], len(b))
}

// Values returns n zero values.
func (a *Arena) Values(n int) []Value {
	if n > arenaValues/8 {
		return make([]Value, n)
	}
	if cap(a.vals)-len(a.vals) < n {
		a.vals = make([]Value, 0, max(min(2*cap(a.vals), arenaValues), 16, n))
	}
	at := len(a.vals)
	a.vals = a.vals[:at+n]
	return a.vals[at : at+n : at+n]
}
