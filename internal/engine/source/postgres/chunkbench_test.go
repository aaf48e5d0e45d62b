package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// chunkQuery is a chunk's query, as rangeQuery makes it.
type chunkQuery func(*source.TableDef, model.Span, model.CopyProgress, int) (string, []any, []int, error)

// benchIndexAgainstTextOrder reads table (rows rows, its key of types
// keyType) whole, one partition from start to end in chunks of the
// default size, with the query index makes (read as a key its index
// orders is: sorts disabled) against the query in the key's text order
// that a key whose index does not give that order is read with
// (textOrderQuery, sorts allowed), in the same run, in turn, after a
// warming read: the queries' time alone (rows read, not built).
func benchIndexAgainstTextOrder(b *testing.B, dsn, table, keyType string, rows int, index func(*source.TableDef) chunkQuery) {
	ctx := context.Background()
	_, conn, def := chunkReader(b, dsn, table)
	span := model.Span{Table: "public." + table, Key: keyType}
	read := func(q chunkQuery, how readOrder) time.Duration {
		start := time.Now()
		var copied model.CopyProgress
		n := 0
		for {
			stmt, args, keyIdx, err := q(def, span, copied, source.DefaultChunkRows)
			if err != nil {
				b.Fatal(err)
			}
			var snap string
			tx, err := chunkTx(ctx, conn, &snap, how)
			if err != nil {
				b.Fatal(err)
			}
			if how != sortedOrder && timeLed(def) {
				// A time first in the key is checked in each chunk's snapshot.
				if ok, err := timeOrdered(ctx, tx, span.Table, def); err != nil || !ok {
					b.Fatalf("%s: its time's text not taken as in time order (%v)", span.Table, err)
				}
			}
			rs, err := tx.Query(ctx, stmt, args...)
			if err != nil {
				b.Fatal(err)
			}
			got, last := 0, make([]string, len(keyIdx))
			for rs.Next() {
				for i, j := range keyIdx {
					last[i] = string(rs.RawValues()[j])
				}
				got++
			}
			if err := rs.Err(); err != nil {
				b.Fatal(err)
			}
			_ = tx.Rollback(ctx)
			n += got
			if got < source.DefaultChunkRows {
				break
			}
			k, err := model.EncodeKeyValues(keyType, last)
			if err != nil {
				b.Fatal(err)
			}
			copied = copied.CopiedThrough(k)
		}
		if n != rows {
			b.Fatalf("read %d rows of %d", n, rows)
		}
		return time.Since(start)
	}
	indexed := index(def)
	textOrder := func(def *source.TableDef, span model.Span, copied model.CopyProgress, limit int) (string, []any, []int, error) {
		return textOrderQuery(quoteQualified(span.Table), def, nil, span, copied, limit, "")
	}
	read(indexed, indexOrder) // warm the table's pages
	var byIndex, byText time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			byIndex += read(indexed, indexOrder)
			byText += read(textOrder, sortedOrder)
		} else {
			byText += read(textOrder, sortedOrder)
			byIndex += read(indexed, indexOrder)
		}
	}
	b.ReportMetric(float64(rows*b.N)/byIndex.Seconds(), "index-rows/s")
	b.ReportMetric(float64(rows*b.N)/byText.Seconds(), "text-order-rows/s")
	b.ReportMetric(byText.Seconds()/byIndex.Seconds(), "speedup")
}
