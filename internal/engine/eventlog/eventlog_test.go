package eventlog

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

var v1 = &source.TableDef{Schema: "public", Name: "t", Columns: []source.ColumnDef{{Name: "id", Type: "text", KeyPos: 1}, {Name: "v", Type: "text", Nullable: true}}}
var v2 = &source.TableDef{Schema: "public", Name: "t", Columns: append(append([]source.ColumnDef{}, v1.Columns...), source.ColumnDef{Name: "w", Type: "int4"})}

func row(ts model.Ts, key string, op source.Op, def *source.TableDef) source.Event {
	e := source.Event{Kind: source.KindDML, Table: "public.t", CommitTs: ts, Def: def, Op: op, Key: key}
	vals := []source.Value{source.Text(key), source.Null}
	if def == v2 {
		vals = append(vals, source.Text(fmt.Sprint(uint64(ts))))
		e.SchemaVersion, e.TableVersion = 1, 25
	}
	if op == source.OpDelete {
		e.Old = vals
	} else {
		e.New = vals
	}
	if op == source.OpUpdate {
		e.Old = []source.Value{source.Text(key), {Unchanged: true}}
		if def == v2 {
			e.Old = append(e.Old, source.Null)
		}
	}
	return e
}

func keys(evs []source.Event) string {
	s := ""
	for _, e := range evs {
		s += fmt.Sprintf("%s@%d ", e.Key, e.CommitTs)
	}
	return s
}

func TestReadsASpanInCommitOrderUpToResolvedAndTheNextSchemaChange(t *testing.T) {
	l, err := Open(t.TempDir(), 5, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Append([]source.Event{row(10, "a", source.OpInsert, v1), row(10, "m", source.OpInsert, v1), row(10, "b", source.OpInsert, v1)}); err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]source.Event{row(20, "b", source.OpUpdate, v1), row(20, "z", source.OpDelete, v1)}); err != nil {
		t.Fatal(err)
	}
	ddl := source.Event{Kind: source.KindDDL, Table: "public.t", CommitTs: 25, Def: v2, SchemaVersion: 1, TableVersion: 25, Statement: "ALTER"}
	if err := l.Append([]source.Event{ddl, row(26, "c", source.OpInsert, v2)}); err != nil {
		t.Fatal(err)
	}
	l.Resolve(40)

	lower := model.Span{Table: "public.t", End: "m"}
	evs, cur, err := l.Read(lower, after(5), 100, 100)
	pos := cur.Done
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(evs); got != "a@10 b@10 b@20 " || pos != 24 {
		t.Fatalf("read %q up to %v; want the lower half up to just before the schema change at 25", got, pos)
	}
	if !reflect.DeepEqual(evs[2], row(20, "b", source.OpUpdate, v1)) {
		t.Fatalf("a row changed on the way: %+v", evs[2])
	}
	if d := l.DDLs("public.t", pos, 100); len(d) != 1 || d[0].Def != v2 {
		t.Fatalf("DDLs %+v", d)
	}
	evs, cur, _ = l.Read(lower, after(25), 100, 100)
	pos = cur.Done
	if got := keys(evs); got != "c@26 " || pos != 40 || evs[0].Def != v2 || evs[0].New[2].Text != "26" {
		t.Fatalf("after the change: %q up to %v (%+v)", got, pos, evs)
	}
	// A batch stops between positions, never inside one that is not
	// larger than a batch.
	evs, cur, _ = l.Read(model.Span{Table: "public.t"}, after(5), 100, 3)
	if got := keys(evs); got != "a@10 m@10 b@10 " || cur != after(10) {
		t.Fatalf("batch of 3: %q up to %+v", got, cur)
	}
	// Other tables are not mixed in.
	if evs, cur, _ := l.Read(model.Span{Table: "public.u"}, after(5), 100, 10); len(evs) != 0 || cur.Done != 40 {
		t.Fatalf("another table: %v up to %v", evs, pos)
	}
	// Positions must grow.
	if err := l.Append([]source.Event{row(30, "q", source.OpInsert, v2)}); err == nil {
		t.Fatal("an append below the resolved position was accepted")
	}
	// Trimmed positions are refused, later ones still read.
	if err := l.Trim(20); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Read(lower, after(10), 100, 10); !errors.Is(err, ErrTrimmed) {
		t.Fatalf("read below the trim: %v", err)
	}
	if evs, _, _ := l.Read(lower, after(25), 100, 10); keys(evs) != "c@26 " {
		t.Fatalf("after trim: %q", keys(evs))
	}
}

func after(ts model.Ts) source.Cursor { return source.Cursor{Done: ts} }

// A large transaction goes to the log in parts as it arrives, stays
// invisible until it commits, and is read back in parts whose cursor
// says where the read stands inside it.
func TestLargeTransactionInParts(t *testing.T) {
	l, err := Open(t.TempDir(), 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	def := v1
	span := model.Span{Table: "public.t"}
	var want []string
	for part := 0; part < 3; part++ {
		var rows []source.Event
		for i := 0; i < 4; i++ {
			k := fmt.Sprintf("k%d%d", part, i)
			rows = append(rows, row(50, k, source.OpInsert, def))
			want = append(want, k+"@50")
		}
		if err := l.AppendPart(rows); err != nil {
			t.Fatal(err)
		}
		if evs, cur, _ := l.Read(span, after(0), 100, 100); len(evs) != 0 || cur != after(0) {
			t.Fatalf("rows of an uncommitted transaction were read: %q up to %+v", keys(evs), cur)
		}
	}
	// The commit brings the last rows; the transaction is whole.
	if err := l.Append([]source.Event{row(50, "z", source.OpInsert, def)}); err != nil {
		t.Fatal(err)
	}
	want = append(want, "z@50")
	if evs, _, _ := l.Read(span, after(0), 100, 100); keys(evs) != strings.Join(want, " ")+" " {
		t.Fatalf("the whole transaction: %q", keys(evs))
	}
	// Read 5 at a time, it comes in parts, in order, each once.
	var got []string
	cur := after(0)
	for reads := 0; ; reads++ {
		evs, next, err := l.Read(span, cur, 100, 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		if next.Inside() != (len(got)+len(evs) < len(want)) || next.Inside() && next.Done != 49 {
			t.Fatalf("after %d rows the cursor is %+v", len(got)+len(evs), next)
		}
		for _, e := range evs {
			got = append(got, fmt.Sprintf("%s@%d", e.Key, e.CommitTs))
		}
		cur = next
		if reads > 10 {
			t.Fatal("the read does not end")
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") || cur != after(50) {
		t.Fatalf("read in parts: %v up to %+v; want %v", got, cur, want)
	}
	// A TRUNCATE later in a transaction erases its rows sent as parts.
	if err := l.AppendPart([]source.Event{row(60, "gone", source.OpInsert, def)}); err != nil {
		t.Fatal(err)
	}
	if err := l.ErasePart("public.t"); err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]source.Event{row(60, "kept", source.OpInsert, def)}); err != nil {
		t.Fatal(err)
	}
	if evs, _, _ := l.Read(span, after(50), 100, 100); keys(evs) != "kept@60 " {
		t.Fatalf("after an erase: %q", keys(evs))
	}
	if err := l.ErasePart("public.t"); err == nil {
		t.Fatal("an erase of resolved rows was accepted")
	}
	if err := l.AppendPart([]source.Event{{Kind: source.KindDDL, Table: "public.t", CommitTs: 70, Def: def}}); err == nil {
		t.Fatal("a schema change was taken in a part")
	}
}

func TestChangedWakesReaders(t *testing.T) {
	l, err := Open("", 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ch := l.Changed()
	l.Resolve(7)
	select {
	case <-ch:
	default:
		t.Fatal("Resolve did not wake")
	}
	if l.Resolved() != 7 {
		t.Fatalf("resolved %v", l.Resolved())
	}
}

func TestNumbersTransactionsAndSummarizesEachForThePartitionOfItsFirstRow(t *testing.T) {
	l, err := Open(t.TempDir(), 0, Options{Transactions: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	other := func(ts model.Ts, key string) source.Event {
		e := row(ts, key, source.OpInsert, v1)
		e.Table = "public.u"
		return e
	}
	// One transaction over two tables, received in two parts; one row of
	// it erased again by a TRUNCATE of its table later in it.
	if err := l.AppendPart([]source.Event{row(10, "m", source.OpInsert, v1), other(10, "x"), row(10, "b", source.OpInsert, v1)}); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendPart([]source.Event{other(10, "y")}); err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]source.Event{row(10, "c", source.OpUpdate, v1)}); err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]source.Event{other(20, "z")}); err != nil {
		t.Fatal(err)
	}
	read := func(table, lo, hi string) []source.Event {
		t.Helper()
		evs, _, err := l.Read(model.Span{Table: table, Start: lo, End: hi}, after(0), 100, 100)
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	show := numbered
	// The summary goes to the span holding the transaction's first row
	// ("m" of public.t), after that span's rows of it; no other span
	// gets one.
	if got, want := show(read("public.t", "", "k")), "b@10#3/2 c@10#5/3 "; got != want {
		t.Fatalf("public.t [,k): %q, want %q", got, want)
	}
	if got, want := show(read("public.t", "k", "")), "m@10#1/1 txn@10(m 5 public.t=3 public.u=2) "; got != want {
		t.Fatalf("public.t [k,): %q, want %q", got, want)
	}
	if got, want := show(read("public.u", "", "")), "x@10#2/1 y@10#4/2 z@20#1/1 txn@20(z 1 public.u=1) "; got != want {
		t.Fatalf("public.u: %q, want %q", got, want)
	}

	// A TRUNCATE in the transaction erases the table's rows so far: they
	// leave its summary too.
	if err := l.AppendPart([]source.Event{row(30, "a", source.OpInsert, v1), other(30, "w")}); err != nil {
		t.Fatal(err)
	}
	if err := l.ErasePart("public.t"); err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]source.Event{other(30, "v")}); err != nil {
		t.Fatal(err)
	}
	evs, _, err := l.Read(model.Span{Table: "public.u"}, after(20), 100, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := show(evs), "w@30#2/1 v@30#3/2 txn@30(w 2 public.u=2) "; got != want {
		t.Fatalf("after an erase: %q, want %q", got, want)
	}

	// A transaction whose rows all came in parts: its commit is the
	// source's id alone (summary with it), or a Resolve (summary without).
	if err := l.AppendPart([]source.Event{other(40, "p"), other(40, "q")}); err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]source.Event{{Kind: source.KindTxn, CommitTs: 40, Txn: &source.TxnSummary{SourceID: "771:2342"}}}); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendPart([]source.Event{other(50, "r")}); err != nil {
		t.Fatal(err)
	}
	l.Resolve(50)
	evs, _, err = l.Read(model.Span{Table: "public.u"}, after(30), 100, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := show(evs), "p@40#1/1 q@40#2/2 txn@40(p 2 public.u=2) r@50#1/1 txn@50(r 1 public.u=1) "; got != want {
		t.Fatalf("parts only: %q, want %q", got, want)
	}
	if evs[2].Txn.SourceID != "771:2342" || evs[4].Txn.SourceID != "" {
		t.Fatalf("source ids %q %q", evs[2].Txn.SourceID, evs[4].Txn.SourceID)
	}
}

// A rollback to a savepoint undoes the rows a transaction's parts sent
// after it (MySQL writes them into its binary log, then the ROLLBACK
// TO): they leave the store, the rows after them are numbered on from
// where it went back to, and the transaction's summary counts what is
// left; a rollback to its start leaves none.
func TestARollbackToASavepointTruncatesATransactionsParts(t *testing.T) {
	// With the newest rows in memory and without: the rows the commit
	// brings after a truncation go to memory, numbered from below where
	// the parts' rows ended.
	for name, opts := range map[string]Options{"store": {Transactions: true}, "memory": {Transactions: true, Memory: NewMemory(DefaultMemory)}} {
		t.Run(name, func(t *testing.T) { rollbackToASavepoint(t, opts) })
	}
}

func rollbackToASavepoint(t *testing.T, opts Options) {
	l, err := Open(t.TempDir(), 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	other := func(ts model.Ts, key string) source.Event {
		e := row(ts, key, source.OpInsert, v1)
		e.Table = "public.u"
		return e
	}
	show := func(table string, from model.Ts) string {
		t.Helper()
		evs, _, err := l.Read(model.Span{Table: table}, after(from), 100, 100)
		if err != nil {
			t.Fatal(err)
		}
		return numbered(evs)
	}
	// a, x before the savepoint; b, y, c after it, undone; then d and z.
	if err := l.AppendPart([]source.Event{row(10, "a", source.OpInsert, v1), other(10, "x"), row(10, "b", source.OpInsert, v1)}); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendPart([]source.Event{other(10, "y"), row(10, "c", source.OpInsert, v1)}); err != nil {
		t.Fatal(err)
	}
	if err := l.TruncatePart(2); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendPart([]source.Event{row(10, "d", source.OpInsert, v1)}); err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]source.Event{other(10, "z")}); err != nil {
		t.Fatal(err)
	}
	if got, want := show("public.t", 0), "a@10#1/1 d@10#3/2 txn@10(a 4 public.t=2 public.u=2) "; got != want {
		t.Fatalf("public.t: %q, want %q", got, want)
	}
	if got, want := show("public.u", 0), "x@10#2/1 z@10#4/2 "; got != want {
		t.Fatalf("public.u: %q, want %q", got, want)
	}
	// Every row of the first table undone: the summary goes with the
	// other's first row.
	if err := l.AppendPart([]source.Event{row(20, "e", source.OpInsert, v1), other(20, "w")}); err != nil {
		t.Fatal(err)
	}
	if err := l.TruncatePart(0); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendPart([]source.Event{other(20, "v")}); err != nil {
		t.Fatal(err)
	}
	l.Resolve(20)
	if got, want := show("public.t", 10), ""; got != want {
		t.Fatalf("public.t after a rollback to the start: %q, want %q", got, want)
	}
	if got, want := show("public.u", 10), "v@20#1/1 txn@20(v 1 public.u=1) "; got != want {
		t.Fatalf("public.u after a rollback to the start: %q, want %q", got, want)
	}
	if err := l.TruncatePart(0); err == nil {
		t.Fatal("a truncation of a resolved transaction was accepted")
	}
	if err := l.AppendPart([]source.Event{other(30, "s")}); err != nil {
		t.Fatal(err)
	}
	if err := l.TruncatePart(2); err == nil {
		t.Fatal("a truncation to more rows than the transaction has was accepted")
	}
}

// numbered writes rows with their numbers in their transaction, and
// transactions' summaries: "k@10#1/1 txn@10(k 1 public.t=1) ".
func numbered(evs []source.Event) string {
	s := ""
	for _, e := range evs {
		if e.Kind == source.KindTxn {
			s += fmt.Sprintf("txn@%d(%s %d", e.CommitTs, e.Key, e.Txn.Events)
			for _, c := range e.Txn.Tables {
				s += fmt.Sprintf(" %s=%d", c.Table, c.Events)
			}
			s += ") "
			continue
		}
		s += fmt.Sprintf("%s@%d#%d/%d ", e.Key, e.CommitTs, e.TxnOrder, e.TxnTableOrder)
	}
	return s
}

func TestNumbersNothingUnlessAsked(t *testing.T) {
	l, err := Open("", 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Append([]source.Event{row(10, "a", source.OpInsert, v1), row(10, "b", source.OpInsert, v1)}); err != nil {
		t.Fatal(err)
	}
	evs, _, err := l.Read(model.Span{Table: "public.t"}, after(0), 100, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].TxnOrder != 0 || evs[1].Kind != source.KindDML {
		t.Fatalf("rows %+v", evs)
	}
}

// A read that reaches its most rows inside a position's rows goes on to
// that position's end, or a read's worth of them: up to twice the rows
// asked, in one slice that grows in a few steps (a streaming benchmark
// found the growth's arithmetic asking for a negative capacity there).
func TestAReadPastItsMostRowsKeepsItsPositionsRows(t *testing.T) {
	l, err := Open("", 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const most = 300
	var evs []source.Event
	for i := 1; i < most; i++ {
		evs = append(evs, row(model.Ts(i), fmt.Sprintf("a%04d", i), source.OpInsert, v1))
	}
	for i := 0; i < 2*most; i++ {
		evs = append(evs, row(model.Ts(most), fmt.Sprintf("b%04d", i), source.OpInsert, v1))
	}
	if err := l.Append(evs); err != nil {
		t.Fatal(err)
	}
	l.Resolve(most)
	got, cur, err := l.Read(model.Span{Table: "public.t"}, after(0), most, most)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2*most-1 || got[len(got)-1].Key != fmt.Sprintf("b%04d", most-1) || !cur.Inside() {
		t.Fatalf("read %d rows up to %+v, the last %q; want %d, the last b%04d, inside position %d", len(got), cur, got[len(got)-1].Key, 2*most-1, most-1, most)
	}
}

// The space a served log takes is what the agent shows operators
// (cdcctl_eventlog_bytes): more once rows are appended, and the log is
// no longer counted once it is not served or closed.
func TestTheSpaceOfServedLogsIsMeasured(t *testing.T) {
	l, err := Open(t.TempDir(), 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := NewServer()
	s.Put("cf", l)
	empty := s.Bytes()["cf"]
	var rows []source.Event
	for i := range 5000 {
		rows = append(rows, row(50, fmt.Sprintf("k%05d", i), source.OpInsert, v1))
	}
	if err := l.Append(rows); err != nil {
		t.Fatal(err)
	}
	if got := s.Bytes()["cf"]; got <= empty {
		t.Fatalf("5,000 rows appended: %d bytes, %d before", got, empty)
	}
	s.Remove("cf", l)
	if _, ok := s.Bytes()["cf"]; ok {
		t.Fatal("a log no longer served is still measured")
	}
	l.Close()
	if got := l.Bytes(); got != 0 {
		t.Fatalf("a closed log takes %d bytes", got)
	}
}
