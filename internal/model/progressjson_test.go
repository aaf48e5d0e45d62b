package model

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// progressTables are tables as maintainers store them: plain positions,
// a final one handed over, a copy under way (its key ends in a NUL, which
// json.Marshal escapes), a copy done, text keys with quotes and non-ASCII.
func progressTables() []ProgressTable {
	return []ProgressTable{
		{},
		{"p1.5": {Checkpoint: 465123456789012345, Node: "capture-1", Epoch: 7}},
		{"p1.5": {Checkpoint: 1, Node: "capture-2", Epoch: 1, Final: true, Handover: true},
			"p1.6": {Checkpoint: 2, Node: "capture-3", Epoch: 2, Copy: CopyProgress{To: "0000000000001a2b\x00", Rows: 4096}}},
		{"orders.9": {Checkpoint: 18446744073709551615, Node: "n", Epoch: 18446744073709551615, Copy: CopyProgress{Done: true, Rows: 9223372036854775807}}},
		{`t"q\.1`: {Node: "ünïcode/\t", Copy: CopyProgress{To: "k€y<&>\x00"}}},
		{"c.1": {Node: "n", Copy: CopyProgress{To: "k\x00", Rows: 3, Key: `(y, "a,b")`}}, "c.2": {Copy: CopyProgress{Key: "(x)"}}, "c.3": {Copy: CopyProgress{Done: true, Key: "(x)"}}},
		{"i.1": {Node: "n", Copy: CopyProgress{Rows: 5, Key: "(sku)", Cursor: "Ab\x00", Read: 9, Order: "(sku latin1_swedish_ci)"}}, "i.2": {Copy: CopyProgress{Cursor: "b", Read: 1}}, "i.3": {Copy: CopyProgress{Order: "o"}}},
		{"a.1": {Node: "n", Copy: CopyProgress{To: "k\x00", Rows: 7, Key: "(id)", Only: "16401", Then: "16420 16433"}}, "a.2": {Copy: CopyProgress{Then: "16401"}}, "a.3": {Copy: CopyProgress{Only: "1"}}},
		{"a.1": {Node: "n", Copy: CopyProgress{Done: true, Rows: 7, Again: 470924802141242112}}, "a.2": {Copy: CopyProgress{Then: "16401", Again: 1}}, "a.3": {Copy: CopyProgress{Only: "1", Again: 3}}},
		{"h.1": {Node: "n", Copy: CopyProgress{To: "k\x00", Rows: 7, Key: "(id)", Again: 4, Horizon: "z\x01"}}, "h.2": {Copy: CopyProgress{Horizon: "9"}}, "h.3": {Copy: CopyProgress{Done: true, Horizon: "q"}}},
	}
}

func TestProgressTablesDecodeAsEncodingJSONDoes(t *testing.T) {
	for _, want := range progressTables() {
		b, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		es, ok := decodeProgressFast(b)
		if !ok {
			t.Errorf("%s: the fast path gave up on what json.Marshal writes", b)
			continue
		}
		if got := asTable(es); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decoded %+v, want %+v", b, got, want)
		}
	}
	// Valid JSON in any other form is still read, by encoding/json.
	for _, b := range []string{
		`{ "p1": {"checkpoint": 5, "node": "c", "epoch": 1} }`,
		`{"p1":{"node":"c","checkpoint":5,"epoch":1}}`,
		`{"p1":{"checkpoint":5,"node":"c","epoch":1,"extra":[1,2]}}`,
		`{"p1":{"checkpoint":5,"node":"c\ud83d\ude00","epoch":1}}`,
		`null`,
	} {
		var want ProgressTable
		if err := json.Unmarshal([]byte(b), &want); err != nil {
			t.Fatal(err)
		}
		es, err := DecodeProgressEntries([]byte(b))
		if got := asTable(es); err != nil || len(got) != len(want) || len(got) > 0 && !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decoded %+v (%v), want %+v", b, got, err, want)
		}
	}
	for _, b := range []string{`{"p1":{"checkpoint":-5,"node":"c","epoch":1}}`, `{"p1":`, `[]`, ``} {
		if _, err := DecodeProgressEntries([]byte(b)); err == nil {
			t.Errorf("%q decoded without an error", b)
		}
	}
}

// asTable is the table a list of positions stands for.
func asTable(es []ProgressEntry) ProgressTable {
	t := ProgressTable{}
	for _, e := range es {
		t[e.Partition] = e.Progress
	}
	return t
}

// FuzzDecodeProgressTable: whatever the fast path accepts, encoding/json
// accepts and decodes to the same table.
func FuzzDecodeProgressTable(f *testing.F) {
	for _, pt := range progressTables() {
		b, _ := json.Marshal(pt)
		f.Add(b)
	}
	f.Add([]byte(`{"p":{"checkpoint":01,"node":"","epoch":0}}`))
	f.Add([]byte(`{"p":{"checkpoint":1,"node":"\u00e9\uD800","epoch":0,"copy":{}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, ok := decodeProgressFast(b)
		if !ok {
			return
		}
		got := asTable(es)
		var want ProgressTable
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("%q: the fast path decoded what encoding/json refuses (%v)", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decoded %+v, encoding/json %+v", b, got, want)
		}
	})
}

// BenchmarkDecodeProgressTable decodes shards as a drain's maintainers
// write them (one and ten partitions, plain positions; a copy under way)
// into a map of the view's own, as a view applies them: with
// DecodeProgressEntries, against json.Unmarshal into a ProgressTable (as
// the view did before) in the same run, and reports their ratio.
//
//	go test -run '^$' -bench DecodeProgressTable ./internal/model
func BenchmarkDecodeProgressTable(b *testing.B) {
	type viewRecord struct {
		Progress
		revision int64
	}
	shard := func(n int, copying bool) []byte {
		t := ProgressTable{}
		for i := 0; i < n; i++ {
			p := Progress{Checkpoint: Ts(465123456789012345 + i), Node: NodeID(fmt.Sprintf("capture-%d", i%10)), Epoch: uint64(i + 3)}
			if copying {
				p.Copy = CopyProgress{To: fmt.Sprintf("%016x\x00", i*4096), Rows: int64(i * 4096)}
			}
			t[fmt.Sprintf("p%d.%d", i, i)] = p
		}
		out, _ := json.Marshal(t)
		return out
	}
	for _, c := range []struct {
		name string
		b    []byte
	}{{"1", shard(1, false)}, {"10", shard(10, false)}, {"10-copying", shard(10, true)}} {
		b.Run(c.name, func(b *testing.B) {
			againstJSON(b, "shard", func() error {
				es, err := DecodeProgressEntries(c.b)
				view := make(map[string]viewRecord, len(es))
				for _, e := range es {
					view[e.Partition] = viewRecord{e.Progress, 1}
				}
				return err
			}, func() error {
				var t ProgressTable
				err := json.Unmarshal(c.b, &t)
				view := make(map[string]viewRecord, len(t))
				for pid, p := range t {
					view[pid] = viewRecord{p, 1}
				}
				return err
			})
		})
	}
}

// againstJSON times ours and encoding/json's decoding of the same bytes
// in runs of 64, alternating, so that the clock's own cost is small and
// both see the same machine, and reports each one's ns per unit and
// their ratio.
func againstJSON(b *testing.B, unit string, ours, std func() error) {
	const run = 64
	var fast, slow time.Duration
	timed := func(f func() error) time.Duration {
		began := time.Now()
		for k := 0; k < run; k++ {
			if err := f(); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(began)
	}
	for i := 0; i < b.N; i++ {
		fast += timed(ours)
		slow += timed(std)
	}
	n := float64(b.N * run)
	b.ReportMetric(float64(fast.Nanoseconds())/n, "ns/"+unit)
	b.ReportMetric(float64(slow.Nanoseconds())/n, "json-ns/"+unit)
	b.ReportMetric(slow.Seconds()/fast.Seconds(), "ratio")
}
