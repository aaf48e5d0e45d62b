package gen

import (
	"container/heap"
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Generator is a gen source. It holds no per-key state: everything about a
// key is computed from (seed, table, key index), so any number of readers
// may share it.
type Generator struct {
	cfg      Config
	width    int   // digits of a key
	space    int64 // 26^width
	meanMs   float64
	ddlEvery int64 // ms, 0 = none

	defsMu sync.Mutex
	defs   map[defKey]*source.TableDef // by table and schema version
}

type defKey struct {
	table  int
	schema uint64
}

// New returns a generator. A config without a start time starts now; a
// changefeed pins the start so the stream never changes.
func New(cfg Config) (*Generator, error) {
	if cfg.Tables < 1 || cfg.Tables > MaxTables || cfg.Keys < 1 || cfg.Keys > MaxKeys || !(cfg.Rate > 0) {
		return nil, fmt.Errorf("gen: invalid config %+v", cfg)
	}
	if cfg.StartMillis <= 0 {
		return nil, fmt.Errorf("gen: the start time must be set (start=<unix ms>)")
	}
	g := &Generator{cfg: cfg, width: 4, space: 26 * 26 * 26 * 26, defs: map[defKey]*source.TableDef{}}
	for g.space < int64(cfg.Keys) {
		g.width++
		g.space *= 26
	}
	g.meanMs = float64(cfg.Tables) * float64(cfg.Keys) * 1000 / cfg.Rate
	g.ddlEvery = cfg.DDLEvery.Milliseconds()
	return g, nil
}

// Config returns the generator's configuration.
func (g *Generator) Config() Config { return g.cfg }

// TableNames returns t0001..tNNNN.
func (g *Generator) TableNames() []string {
	out := make([]string, g.cfg.Tables)
	for i := range out {
		out[i] = TableName(i)
	}
	return out
}

// TableName is the name of table i (0-based): t0001 for 0.
func TableName(i int) string { return fmt.Sprintf("t%04d", i+1) }

func tableIndex(name string) (int, bool) {
	if len(name) < 2 || name[0] != 't' {
		return 0, false
	}
	n, err := strconv.Atoi(name[1:])
	if err != nil || n < 1 {
		return 0, false
	}
	return n - 1, true
}

// Key returns the key of index i: base-26 over width digits, spread evenly
// over the whole key space so that key ranges split where expected.
func (g *Generator) Key(i int) string {
	n := int64(i) * g.space / int64(g.cfg.Keys)
	b := make([]byte, g.width)
	for d := g.width - 1; d >= 0; d-- {
		b[d] = byte('a' + n%26)
		n /= 26
	}
	return string(b)
}

// KeyIndex returns the index of a key, or false if it is not one of ours.
func (g *Generator) KeyIndex(key string) (int, bool) {
	i := g.firstIndexAtOrAbove(key)
	if i < g.cfg.Keys && g.Key(i) == key {
		return i, true
	}
	return 0, false
}

// firstIndexAtOrAbove is the smallest key index whose key is ≥ s.
func (g *Generator) firstIndexAtOrAbove(s string) int {
	return sort.Search(g.cfg.Keys, func(i int) bool { return g.Key(i) >= s })
}

// keyRange returns the key indexes [lo, hi) inside a span.
func (g *Generator) keyRange(span model.Span) (int, int) {
	lo := 0
	if span.Start != "" {
		lo = g.firstIndexAtOrAbove(span.Start)
	}
	hi := g.cfg.Keys
	if span.End != "" {
		hi = g.firstIndexAtOrAbove(span.End)
	}
	return lo, max(lo, hi)
}

// KeyBoundaries returns the n-1 keys that cut a table into n ranges
// holding about the same number of keys.
func (g *Generator) KeyBoundaries(n int) []string {
	var out []string
	for i := 1; i < n; i++ {
		idx := i * g.cfg.Keys / n
		if idx <= 0 || idx >= g.cfg.Keys {
			continue
		}
		k := g.Key(idx)
		if len(out) == 0 || out[len(out)-1] < k {
			out = append(out, k)
		}
	}
	return out
}

// schedule is one key's update plan: update n (n ≥ 1) commits at
// firstMs + (n-1)*periodMs.
type schedule struct{ firstMs, periodMs int64 }

func (g *Generator) schedule(table, key int) schedule {
	h := mix(g.cfg.Seed, uint64(table), uint64(key))
	u1 := float64(h>>11) / (1 << 53)
	period := int64(g.meanMs * (0.5 + u1))
	if period < 1 {
		period = 1
	}
	u2 := mix(h, 0x9e3779b97f4a7c15, 0) % uint64(period)
	return schedule{firstMs: g.cfg.StartMillis + 1 + int64(u2), periodMs: period}
}

// count is how many updates of a key committed at or before ms.
func (s schedule) count(ms int64) uint64 {
	if ms < s.firstMs {
		return 0
	}
	return uint64((ms-s.firstMs)/s.periodMs) + 1
}

func (s schedule) at(n uint64) int64 { return s.firstMs + int64(n-1)*s.periodMs }

// Count returns how many versions of a key commit at or before ts: the
// versions a sink must hold once its checkpoint has reached ts.
func (g *Generator) Count(table string, key string, ts model.Ts) (uint64, bool) {
	ti, ok := tableIndex(table)
	if !ok || ti >= g.cfg.Tables {
		return 0, false
	}
	ki, ok := g.KeyIndex(key)
	if !ok {
		return 0, false
	}
	return g.schedule(ti, ki).count(ts.Millis()), true
}

// CountIndex is Count by indexes, for walking every key.
func (g *Generator) CountIndex(table, key int, ts model.Ts) uint64 {
	return g.schedule(table, key).count(ts.Millis())
}

// CommitTs is when version n of a key commits.
func (g *Generator) CommitTs(table, key int, n uint64) model.Ts {
	return model.TsFromMillis(g.schedule(table, key).at(n))
}

// TableIndex returns the 0-based index of a table name.
func (g *Generator) TableIndex(name string) (int, bool) {
	i, ok := tableIndex(name)
	return i, ok && i < g.cfg.Tables
}

// SchemaAt is the table schema version a DML committed at ms is written
// under: the number of DDLs committed before it. A DDL commits at logical
// 1 of its millisecond, after any DML of that millisecond.
func (g *Generator) SchemaAt(ms int64) uint64 {
	if g.ddlEvery == 0 || ms <= g.cfg.StartMillis {
		return 0
	}
	return uint64((ms - g.cfg.StartMillis - 1) / g.ddlEvery)
}

// Def is a table's definition at a schema version: id (the key),
// version and value, then a column c<i> per DDL. One value per table and
// version is shared by its events.
func (g *Generator) Def(table int, schema uint64) *source.TableDef {
	k := defKey{table, schema}
	g.defsMu.Lock()
	defer g.defsMu.Unlock()
	if d, ok := g.defs[k]; ok {
		return d
	}
	cols := make([]source.ColumnDef, 0, 3+schema)
	cols = append(cols,
		source.ColumnDef{Name: "id", Type: "varchar(16)", KeyPos: 1},
		source.ColumnDef{Name: "version", Type: "int8"},
		source.ColumnDef{Name: "value", Type: "varchar(32)"},
	)
	for c := uint64(1); c <= schema; c++ {
		cols = append(cols, source.ColumnDef{Name: fmt.Sprintf("c%d", c), Type: "int4"})
	}
	d := &source.TableDef{Name: TableName(table), Columns: cols}
	g.defs[k] = d
	return d
}

// isDelete says whether change n of a key deletes it: every Deletes-th
// change, when deletes are on. The change after a delete inserts the key
// again.
func (g *Generator) isDelete(n uint64) bool {
	return g.cfg.Deletes > 0 && n%uint64(g.cfg.Deletes) == 0
}

// image is the row as version n of a key left it, under a schema.
func (g *Generator) image(table, key int, n uint64, schema uint64) []source.Value {
	vals := make([]source.Value, 0, 3+schema)
	vals = append(vals,
		source.Text(g.Key(key)),
		source.Text(strconv.FormatUint(n, 10)),
		source.Text(RowValue(g.cfg.Seed, table, key, n)),
	)
	for c := uint64(1); c <= schema; c++ {
		vals = append(vals, source.Text(strconv.FormatUint(c, 10)))
	}
	return vals
}

// Row builds the DML event of change n of a key: an insert for the first
// change and the change after a delete, a delete every Deletes-th change,
// an update otherwise. Its "version" column is n (a delete carries the
// row it deleted, version n-1).
func (g *Generator) Row(table, key int, n uint64) source.Event {
	s := g.schedule(table, key)
	ms := s.at(n)
	schema := g.SchemaAt(ms)
	e := source.Event{
		Kind: source.KindDML, Table: TableName(table), CommitTs: model.TsFromMillis(ms), Def: g.Def(table, schema),
		SchemaVersion: schema, TableVersion: g.TableVersion(schema), Key: g.Key(key),
	}
	switch {
	case g.isDelete(n):
		e.Op, e.Old = source.OpDelete, g.image(table, key, n-1, schema)
	case n == 1 || g.isDelete(n-1):
		e.Op, e.New = source.OpInsert, g.image(table, key, n, schema)
	default:
		e.Op, e.New, e.Old = source.OpUpdate, g.image(table, key, n, schema), g.image(table, key, n-1, schema)
	}
	return e
}

// Version is the change number of a gen DML: its "version" column, plus
// one for a delete (which carries the row it deleted).
func Version(e *source.Event) uint64 {
	img := e.Image()
	if len(img) < 2 {
		return 0
	}
	v, _ := strconv.ParseUint(img[1].Text, 10, 64)
	if e.Op == source.OpDelete {
		v++
	}
	return v
}

// TableVersion is the commit ts at which a schema version began: the
// source's start for version 0, the version's DDL otherwise.
func (g *Generator) TableVersion(schema uint64) model.Ts {
	if schema == 0 {
		return model.TsFromMillis(g.cfg.StartMillis)
	}
	return model.TsFromMillis(g.cfg.StartMillis + int64(schema)*g.ddlEvery).WithLogical(1)
}

// RowValue is the deterministic payload of one row version; verify
// recomputes it to catch corrupted rows.
func RowValue(seed uint64, table, key int, n uint64) string {
	return strconv.FormatUint(mix(seed^0x5bd1e995, uint64(table)<<32|uint64(key), n), 36)
}

// DDLs returns the DDL events of one table with commit ts in (from, upTo].
func (g *Generator) DDLs(table string, from, upTo model.Ts) []source.Event {
	ti, ok := tableIndex(table)
	if g.ddlEvery == 0 || !ok || ti >= g.cfg.Tables {
		return nil
	}
	var out []source.Event
	// Start at the DDL just before from, not at the first: a dispatcher
	// asks on every read, and a long-running stream has many behind it.
	for m := max(1, (from.Millis()-g.cfg.StartMillis)/g.ddlEvery); ; m++ {
		ts := model.TsFromMillis(g.cfg.StartMillis + m*g.ddlEvery).WithLogical(1)
		if ts > upTo {
			return out
		}
		if ts > from {
			out = append(out, source.Event{
				Kind: source.KindDDL, Table: table, CommitTs: ts, Def: g.Def(ti, uint64(m)), SchemaVersion: uint64(m), TableVersion: ts,
				Statement: fmt.Sprintf("ALTER TABLE `%s` ADD COLUMN `c%d` INT NOT NULL DEFAULT %d", table, m, m),
			})
		}
	}
}

// NextDDL implements source.DDLSchedule.
func (g *Generator) NextDDL(table string, after model.Ts) (model.Ts, bool) {
	ti, ok := tableIndex(table)
	if g.ddlEvery == 0 || !ok || ti >= g.cfg.Tables {
		return 0, false
	}
	for m := max(1, (after.Millis()-g.cfg.StartMillis)/g.ddlEvery); ; m++ {
		if ts := model.TsFromMillis(g.cfg.StartMillis + m*g.ddlEvery).WithLogical(1); ts > after {
			return ts, true
		}
	}
}

// Open returns a reader of a span's DML from a position (exclusive). Its
// cost is proportional to the span's own keys and events.
func (g *Generator) Open(span model.Span, from model.Ts) (source.Reader, error) {
	ti, ok := tableIndex(span.Table)
	if !ok || ti >= g.cfg.Tables {
		return nil, fmt.Errorf("gen: no table %q (tables are t0001..%s)", span.Table, TableName(g.cfg.Tables-1))
	}
	lo, hi := g.keyRange(span)
	r := &reader{g: g, table: ti, pos: from, heap: make(keyHeap, 0, hi-lo)}
	fromMs := from.Millis()
	for k := lo; k < hi; k++ {
		s := g.schedule(ti, k)
		n := s.count(fromMs) + 1
		r.heap = append(r.heap, next{ms: s.at(n), key: k, n: n, s: s})
	}
	heap.Init(&r.heap)
	return r, nil
}

type reader struct {
	g     *Generator
	table int
	pos   model.Ts
	heap  keyHeap
}

func (r *reader) Position() model.Ts { return r.pos }

// NextAt implements source.Lookahead: the heap's top is the span's next
// commit.
func (r *reader) NextAt() (model.Ts, bool) {
	if len(r.heap) == 0 {
		return 0, false
	}
	return model.TsFromMillis(r.heap[0].ms), true
}

// Read implements source.Reader: generated, it never fails.
func (r *reader) Read(_ context.Context, upTo model.Ts, maxEvents int) ([]source.Event, error) {
	return r.read(upTo, maxEvents), nil
}

func (r *reader) read(upTo model.Ts, maxEvents int) []source.Event {
	var out []source.Event
	upMs := upTo.Millis()
	for len(r.heap) > 0 {
		top := r.heap[0]
		if top.ms > upMs {
			break
		}
		// Stop only between commit timestamps, so Position stays exact.
		if len(out) >= maxEvents && model.TsFromMillis(top.ms) != out[len(out)-1].CommitTs {
			r.pos = out[len(out)-1].CommitTs
			return out
		}
		out = append(out, r.g.Row(r.table, top.key, top.n))
		r.heap[0].n++
		r.heap[0].ms = top.s.at(r.heap[0].n)
		heap.Fix(&r.heap, 0)
	}
	if upTo > r.pos {
		r.pos = upTo
	}
	return out
}

type next struct {
	ms  int64
	key int
	n   uint64
	s   schedule
}

type keyHeap []next

func (h keyHeap) Len() int { return len(h) }
func (h keyHeap) Less(i, j int) bool {
	if h[i].ms != h[j].ms {
		return h[i].ms < h[j].ms
	}
	return h[i].key < h[j].key
}
func (h keyHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *keyHeap) Push(x any)   { *h = append(*h, x.(next)) }
func (h *keyHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// mix is splitmix64 over three words: cheap, well spread, stable forever
// (changing it would change every stream, so it must never change).
func mix(a, b, c uint64) uint64 {
	x := a ^ (b * 0x9e3779b97f4a7c15) ^ (c * 0xc2b2ae3d27d4eb4f)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
