package postgres

import (
	"strconv"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// snapshot-rate= bounds the rows the initial snapshot reads a second on
// a node, across the changefeed's partitions there: three partitions
// copying 3,000 rows at 300 a second take at least nine seconds (the
// first second's rows may come at once), however fast the machine; every
// row is copied once, and a change made while the copy is paced streams
// to its partition before the copy is done (the rate holds back chunks,
// not the stream).
func TestTheSnapshotRateBoundsTheCopyNotTheStream(t *testing.T) {
	t.Parallel()
	const rows, rate = 3000, 300
	srv, dsn := newDB(t, `CREATE TABLE r (id int8 PRIMARY KEY, v text);
		INSERT INTO r SELECT g, md5(g::text) FROM generate_series(1, `+strconv.Itoa(rows)+`) g`)
	rig := startCopyRig(t, dsn+"&tables=r&chunk-rows=100&snapshot-rate="+strconv.Itoa(rate), "paced")
	key := func(id int) string {
		k, err := model.EncodeKeyValues("int8", []string{strconv.Itoa(id)})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	began := time.Now()
	parts := []*partition{
		rig.run(model.Span{Table: "public.r", End: key(1000), Key: "int8"}, rig.start, model.CopyProgress{}),
		rig.run(model.Span{Table: "public.r", Start: key(1000), End: key(2000), Key: "int8"}, rig.start, model.CopyProgress{}),
		rig.run(model.Span{Table: "public.r", Start: key(2000), Key: "int8"}, rig.start, model.CopyProgress{}),
	}
	psql(t, srv, dsn, `INSERT INTO r VALUES (5000, 'streamed')`)
	rig.waitFor(t, parts[2], "5000", 60*time.Second)
	if c := parts[2].progress(); c.Done {
		t.Errorf("the copy was done (%+v) before a change made as it began streamed: the rate held back the stream", c)
	}
	for _, p := range parts {
		p.waitDone(t)
	}
	took := time.Since(began)
	copies := map[string]int{}
	for _, p := range parts {
		for _, e := range p.stopped(t) {
			if e.Kind == source.KindDML && e.Op == source.OpInsert {
				copies[textKey(&e)]++
			}
		}
	}
	rig.stop(t)
	for id := 1; id <= rows; id++ {
		if n := copies[strconv.Itoa(id)]; n != 1 {
			t.Fatalf("row %d copied %d times", id, n)
		}
	}
	if least := time.Duration(rows-rate) * time.Second / rate; took < least {
		t.Fatalf("%d rows copied in %s at snapshot-rate=%d: the rate allows no less than %s", rows, took, rate, least)
	}
	t.Logf("%d rows copied in %s at snapshot-rate=%d", rows, took.Round(time.Millisecond), rate)
}
