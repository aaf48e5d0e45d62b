package storage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/bucket"
	"github.com/cdcctl/cdcctl/internal/engine/row"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Issue 31: with delivery=exactly-once on a bucket that keeps notes, a
// flush that follows its writer's progress object notes where its rows
// reach on its data files instead of writing the object again (one
// write fewer of three for a file per flush), and the next owner
// resumes after the last flush whose files are all there: not earlier
// (it would write rows twice), never later (it would lose some). Each
// flush here writes two directories, the table's and the transaction
// records'; some end inside a transaction, where no one can resume.
func TestExactlyOnceStorageResumesAfterTheLastFlushNotedWhole(t *testing.T) {
	dir := t.TempDir()
	uri := "file://" + dir + "?flush-interval=10m&max-flush-delay=0s&delivery=exactly-once&transaction-meta=true"
	ctx := context.Background()
	s := openResumed(t, uri, storage.Env{Changefeed: "demo@1"})
	def := &row.TableDef{Schema: "shop", Name: "orders", Columns: []row.ColumnDef{{Name: "id", Type: "int8", KeyPos: 1}}}
	// Flush i holds one transaction committed at 100·i; flushes 21 and 22
	// hold the first parts of a transaction that commits in flush 23.
	flush := func(i int) {
		t.Helper()
		ts := model.Ts(100 * i)
		key := fmt.Sprint(i)
		b := &sink.Batch{Dispatcher: "p1.1", Epoch: 1, End: sink.Position{Ts: ts}, OnFlushed: func(error) {},
			Events: []row.Event{{Kind: row.KindDML, Table: "shop.orders", CommitTs: ts, Def: def, Op: row.OpInsert, Key: key, New: []row.Value{row.Text(key)}, TxnOrder: 1, TxnTableOrder: 1}}}
		if i == 21 || i == 22 {
			b.Events[0].CommitTs, b.End, b.Inside = 2300, sink.Position{Ts: 2299}, true
		} else {
			b.Txns = []row.Event{{Kind: row.KindTxn, Table: "shop.orders", CommitTs: ts, Def: def, Key: key,
				Txn: &row.TxnSummary{Events: 1, Tables: []row.TableCount{{Table: "shop.orders", Events: 1}}}}}
		}
		if err := s.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx, "p1.1"); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 20; i++ {
		flush(i)
	}
	// Flush 1 wrote the progress object, 2 to 17 noted, 18 wrote it again.
	var p struct{ Intent struct{ Files []string } }
	body, err := os.ReadFile(filepath.Join(dir, "cdcctl-progress", "p1.json"))
	if err != nil || json.Unmarshal(body, &p) != nil || len(p.Intent.Files) != 2 || !strings.HasSuffix(p.Intent.Files[0], "_000018.json") {
		t.Fatalf("after 20 flushes the progress object is %s (%v); want flush 18's intent: flushes noted on their files write none", body, err)
	}
	for i := 21; i <= 23; i++ {
		flush(i)
	}
	files := func(pattern string) []string {
		got, _ := filepath.Glob(filepath.Join(dir, pattern))
		return got
	}
	table, txns := files("shop/orders/*/CDC_p1.1_*.json"), files("cdcctl-transaction/CDC_p1.1_*.json")
	if len(table) != 23 || len(txns) != 21 {
		t.Fatalf("%d table files and %d transaction files, want 23 and 21", len(table), len(txns))
	}
	resume := func(want model.Ts) {
		t.Helper()
		o, err := storage.OpenWith(ctx, uri, quiet(), storage.Env{Changefeed: "demo@1"})
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		at, ok, err := o.Resume(ctx, sink.Writer{Dispatcher: "p1.2-handover", Partition: "p1", Epoch: 2})
		if err != nil || !ok || at.Ts != want {
			t.Fatalf("resumed at %d (%v, %v); want %d", at.Ts, ok, err, want)
		}
	}
	resume(2300)
	gone := func(f string) {
		t.Helper()
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Fatalf("%s, a file of a flush cut short, is still there (%v): a reader listing the directory reads its rows twice", filepath.Base(f), err)
		}
	}
	tableIdx := filepath.Join(filepath.Dir(table[0]), "meta", "CDC_p1.1.index")
	txnIdx := filepath.Join(filepath.Dir(txns[0]), "meta", "CDC_p1.1.index")
	// cutAt leaves the bucket as a crash in flush i would, after its
	// table file and before its transaction file: the later flushes'
	// files gone, and the indexes at the flushes before (a flush names
	// its files in their indexes after writing them all).
	cutAt := func(i int) {
		t.Helper()
		for _, f := range table[i:] {
			_ = os.Remove(f)
		}
		for _, f := range txns[min(i-1, 20):] {
			_ = os.Remove(f)
		}
		if err := os.WriteFile(tableIdx, []byte(filepath.Base(table[i-2])+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(txnIdx, []byte(filepath.Base(txns[min(i-2, 19)])+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A crash in the last flush: it is not durable, and neither are the
	// two before it, which end inside its transaction; its table file,
	// which no index names, is removed.
	cutAt(23)
	resume(2000)
	gone(table[22])
	// A crash before a table file's index: the resume names the file in
	// its index again, and only forward (flushes 21 and 22 count for
	// nothing yet).
	if err := os.WriteFile(tableIdx, []byte(filepath.Base(table[18])+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	resume(2000)
	if got, _ := os.ReadFile(tableIdx); strings.TrimSpace(string(got)) != filepath.Base(table[19]) {
		t.Fatalf("the index names %q after the resume; want flush 20's file %s", got, filepath.Base(table[19]))
	}
	// A crash in a noted flush.
	cutAt(19)
	resume(1800)
	gone(table[18])
	// A crash in the flush that wrote the progress object: the next
	// owner resumes after the flush before it (the object's committed
	// position).
	cutAt(18)
	resume(1700)
	gone(table[17])
	// The same crash after a version that named each file in its index
	// before it wrote the next: the file its index names stays (a reader
	// may have read it).
	if err := os.WriteFile(table[17], []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tableIdx, []byte(filepath.Base(table[17])+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	resume(1700)
	if _, err := os.Stat(table[17]); err != nil {
		t.Fatalf("a file its index names was removed: %v", err)
	}
}

// While a node that reads no notes is in the cluster (an earlier
// version, in a rolling upgrade), every flush writes the progress
// object, which is all such a node resumes from after a crash; once
// every node reads notes, flushes note again.
func TestFlushesWriteTheProgressObjectWhileANodeReadsNoNotes(t *testing.T) {
	dir, _, allRead, write := gatedFlusher(t)
	// flush writes flush i and says which flush the progress object's
	// intent names.
	flush := func(i int) string {
		t.Helper()
		write(i, model.Ts(100*i), false)
		var p struct{ Intent struct{ Files []string } }
		body, err := os.ReadFile(filepath.Join(dir, "cdcctl-progress", "p1.json"))
		if err != nil || json.Unmarshal(body, &p) != nil || len(p.Intent.Files) != 1 {
			t.Fatalf("after flush %d the progress object is %s (%v)", i, body, err)
		}
		f := p.Intent.Files[0]
		return f[len(f)-len("000000.json") : len(f)-len(".json")]
	}
	for i, want := range []string{"000001", "000001", "000001"} {
		if got := flush(i + 1); got != want {
			t.Fatalf("every node reads notes: after flush %d the progress object names flush %s, want %s (the others noted)", i+1, got, want)
		}
	}
	allRead.Store(false)
	for i := 4; i <= 6; i++ {
		if got, want := flush(i), fmt.Sprintf("%06d", i); got != want {
			t.Fatalf("a node reads no notes: after flush %d the progress object names flush %s, want %s", i, got, want)
		}
	}
	allRead.Store(true)
	if got := flush(7); got != "000006" {
		t.Fatalf("every node reads notes again: after flush 7 the progress object names flush %s, want 000006 (7 noted)", got)
	}
}

// openResumed opens an exactly-once sink, closed when the test ends, and
// resumes dispatcher p1.1 of partition p1 on it.
func openResumed(t *testing.T, uri string, env storage.Env) *storage.Sink {
	t.Helper()
	ctx := context.Background()
	s, err := storage.OpenWith(ctx, uri, quiet(), env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, _, err := s.Resume(ctx, sink.Writer{Dispatcher: "p1.1", Partition: "p1", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	return s
}

// A flush inside a transaction while notes are off leaves neither a
// note nor the progress object; were the next flushes noted once notes
// are on again, a resume would stop at its file, and the noted files
// after it, still in their index, would be written again. The flush that
// ends the transaction writes the object instead, and a resume goes on
// after it (found by a review: it resumed at 100, not 400).
func TestNotesTurnedOnInsideATransactionResumeAfterIt(t *testing.T) {
	_, uri, allRead, flush := gatedFlusher(t)
	ctx := context.Background()
	flush(1, 100, false)
	allRead.Store(false)
	flush(2, 400, true)
	allRead.Store(true)
	flush(3, 400, true)
	flush(4, 400, false)
	o, err := storage.OpenWith(ctx, uri, quiet(), storage.Env{Changefeed: "demo@1"})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	at, ok, err := o.Resume(ctx, sink.Writer{Dispatcher: "p1.2-handover", Partition: "p1", Epoch: 2})
	if err != nil || !ok || at.Ts != 400 {
		t.Fatalf("resumed at %d (%v, %v); want 400, after the transaction every file of which is there", at.Ts, ok, err)
	}
}

// A resume follows the notes its predecessor wrote whether or not the
// resuming node could keep notes itself: reading one needs no more than
// reading the file. A node whose probe for notes failed when its sink
// opened (a full disk, a shard of its temporary directory it could not
// write) resumed at the progress object's intent, and the rows of the
// noted flushes after it were written again.
func TestAResumeFollowsNotesItCouldNotWriteItself(t *testing.T) {
	dir, uri, _, flush := gatedFlusher(t)
	for i := 1; i <= 3; i++ {
		flush(i, model.Ts(100*i), false) // one progress object, two notes
	}
	// The probe's temporary file cannot be made: its shard is a file.
	h := fnv.New32a()
	h.Write([]byte(".notes"))
	shard := filepath.Join(dir, bucket.TempDir, fmt.Sprintf("%02x", h.Sum32()%64))
	if err := os.RemoveAll(shard); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shard, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	o, err := storage.OpenWith(ctx, uri, quiet(), storage.Env{Changefeed: "demo@1"})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	at, ok, err := o.Resume(ctx, sink.Writer{Dispatcher: "p1.2-handover", Partition: "p1", Epoch: 2})
	if err != nil || !ok || at.Ts != 300 {
		t.Fatalf("resumed at %d (%v, %v); want 300, after the last noted flush", at.Ts, ok, err)
	}
}

// A note is measured as an object store gets it, path-escaped: one
// holding a snapshot's key in Chinese (900 bytes as written, 2,700
// escaped) is too large for S3's metadata, and the flush writes the
// progress object instead of a note S3 would refuse (the flush failed,
// and every flush of its owner after it).
func TestANoteTooLargeEscapedIsNotWritten(t *testing.T) {
	dir := t.TempDir()
	uri := "file://" + dir + "?flush-interval=10m&max-flush-delay=0s&delivery=exactly-once"
	s := openResumed(t, uri, storage.Env{Changefeed: "demo@1"})
	def := &row.TableDef{Schema: "shop", Name: "orders", Columns: []row.ColumnDef{{Name: "k", Type: "text", KeyPos: 1}}}
	ctx := context.Background()
	for i, to := range []string{"a", strings.Repeat("键", 300)} {
		commit := model.Ts(100 * (i + 1))
		b := &sink.Batch{Dispatcher: "p1.1", Epoch: 1, End: sink.Position{Ts: commit, Copied: model.CopyProgress{To: to}}, OnFlushed: func(error) {},
			Events: []row.Event{{Kind: row.KindDML, Table: "shop.orders", CommitTs: commit, Def: def, Op: row.OpInsert, Key: to, New: []row.Value{row.Text(to)}}}}
		if err := s.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx, "p1.1"); err != nil {
			t.Fatal(err)
		}
	}
	var p struct{ Intent struct{ Files []string } }
	body, err := os.ReadFile(filepath.Join(dir, "cdcctl-progress", "p1.json"))
	if err != nil || json.Unmarshal(body, &p) != nil || len(p.Intent.Files) != 1 || !strings.HasSuffix(p.Intent.Files[0], "000002.json") {
		t.Fatalf("after a flush whose note is too large escaped, the progress object is %s (%v); want its intent to name flush 2", body, err)
	}
}

// gatedFlusher opens an exactly-once sink whose notes allRead allows (on
// at first), resumed as dispatcher p1.1, and returns its directory, its
// URI and flush: one row of key i committed at commit written and
// flushed, its batch ending inside its transaction when inside.
func gatedFlusher(t *testing.T) (dir, uri string, allRead *atomic.Bool, flush func(i int, commit model.Ts, inside bool)) {
	dir = t.TempDir()
	uri = "file://" + dir + "?flush-interval=10m&max-flush-delay=0s&delivery=exactly-once"
	allRead = &atomic.Bool{}
	allRead.Store(true)
	s := openResumed(t, uri, storage.Env{Changefeed: "demo@1", Notes: allRead.Load})
	def := &row.TableDef{Schema: "shop", Name: "orders", Columns: []row.ColumnDef{{Name: "id", Type: "int8", KeyPos: 1}}}
	return dir, uri, allRead, func(i int, commit model.Ts, inside bool) {
		t.Helper()
		ctx, key := context.Background(), fmt.Sprint(i)
		b := &sink.Batch{Dispatcher: "p1.1", Epoch: 1, End: sink.Position{Ts: commit}, Inside: inside, OnFlushed: func(error) {},
			Events: []row.Event{{Kind: row.KindDML, Table: "shop.orders", CommitTs: commit, Def: def, Op: row.OpInsert, Key: key, New: []row.Value{row.Text(key)}}}}
		if inside {
			b.End.Ts = commit - 1
		}
		if err := s.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx, "p1.1"); err != nil {
			t.Fatal(err)
		}
	}
}
