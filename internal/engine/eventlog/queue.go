package eventlog

// rowQueue is a table's kept rows in their order, in blocks of a fixed
// size: a table's tail grows by a block at a time and shrinks from its
// front, so rows are never copied (one slice doubling as a table took
// hundreds of thousands of rows copied them again and again).
type rowQueue struct {
	blocks [][]keptRow // every block but the last is full
	head   int         // rows of the first block dropped already
}

const blockRows = 256

func (q *rowQueue) len() int {
	if len(q.blocks) == 0 {
		return 0
	}
	return (len(q.blocks)-1)*blockRows + len(q.blocks[len(q.blocks)-1]) - q.head
}

func (q *rowQueue) at(i int) *keptRow {
	i += q.head
	return &q.blocks[i/blockRows][i%blockRows]
}

func (q *rowQueue) push(k keptRow) {
	if n := len(q.blocks); n == 0 {
		// Small at first, grown by append up to a whole block: most
		// tables of a changefeed of many hold a row or two at a time.
		q.blocks = append(q.blocks, make([]keptRow, 0, 4))
	} else if len(q.blocks[n-1]) == blockRows {
		// A table past a block is a busy one: whole blocks from there.
		q.blocks = append(q.blocks, make([]keptRow, 0, blockRows))
	}
	last := &q.blocks[len(q.blocks)-1]
	*last = append(*last, k)
}

// dropFront drops the first n rows.
func (q *rowQueue) dropFront(n int) {
	if n >= q.len() {
		clear(q.blocks)
		q.blocks, q.head = nil, 0
		return
	}
	for n > 0 {
		b := q.blocks[0]
		take := min(n, len(b)-q.head)
		clear(b[q.head : q.head+take]) // their values may be large: not kept alive
		q.head += take
		n -= take
		if q.head == blockRows {
			q.blocks[0] = nil
			q.blocks, q.head = q.blocks[1:], 0
		}
	}
}

// dropBack drops the last n rows.
func (q *rowQueue) dropBack(n int) {
	if n >= q.len() {
		q.dropFront(n)
		return
	}
	for n > 0 {
		last := len(q.blocks) - 1
		b := q.blocks[last]
		low := 0
		if last == 0 {
			low = q.head
		}
		take := min(n, len(b)-low)
		clear(b[len(b)-take:])
		q.blocks[last] = b[:len(b)-take]
		n -= take
		if len(q.blocks[last]) == 0 {
			q.blocks[last] = nil
			q.blocks = q.blocks[:last]
		}
	}
}

// search is the index of the first row at or after p.
func (q *rowQueue) search(p pos) int {
	lo, hi := 0, q.len()
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if q.at(m).pos().before(p) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}
