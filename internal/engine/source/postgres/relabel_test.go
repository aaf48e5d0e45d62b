package postgres

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Which enums a look finds renamed: a value's label changed, by the
// value's oid; a value added changes no row, and an enum with two values
// renamed is named once.
func TestTheEnumsWhoseValuesWereRenamed(t *testing.T) {
	before := map[uint32]enumLabel{1: {Type: 10, Label: "ok"}, 2: {Type: 10, Label: "sad"}, 3: {Type: 20, Label: "low"}, 4: {Type: 20, Label: "high"}, 5: {Type: 30, Label: "x"}}
	now := map[uint32]enumLabel{1: {Type: 10, Label: "ok"}, 2: {Type: 10, Label: "blue"}, 3: {Type: 20, Label: "lo"}, 4: {Type: 20, Label: "hi"},
		5: {Type: 30, Label: "x"}, 6: {Type: 30, Label: "y"}}
	if got := relabeled(before, now); !slices.Equal(got, []uint32{10, 20}) {
		t.Fatalf("renamed: %v, want [10 20]", got)
	}
	if got := relabeled(now, now); len(got) != 0 {
		t.Fatalf("nothing renamed: %v", got)
	}
}

// A run starts from the newer of its source's labels and its resume
// point's: a source opened anew takes the point's; one that ran before
// keeps its own unless the point's look was later (another capture
// maintained the changefeed meanwhile and saw a rename this one did
// not: its old labels would find that rename undone, or a later one
// back to them not at all).
func TestARunStartsFromTheNewerLabels(t *testing.T) {
	old := map[uint32]enumLabel{1: {Type: 10, Label: "sad"}}
	renamed := map[uint32]enumLabel{1: {Type: 10, Label: "blue"}}
	for _, c := range []struct {
		name   string
		own    map[uint32]enumLabel
		ownAt  int64
		point  position
		want   string
		wantAt int64
	}{
		{"opened anew", nil, 0, position{Labels: renamed, LabelsAt: 20}, "blue", 20},
		{"its own newer", renamed, 30, position{Labels: old, LabelsAt: 20}, "blue", 30},
		{"the point's newer", old, 10, position{Labels: renamed, LabelsAt: 20}, "blue", 20},
		{"a point without", old, 10, position{}, "sad", 10},
	} {
		s := &Source{labels: c.own, labelsAt: c.ownAt}
		s.takeLabels(c.point)
		if s.labels[1].Label != c.want || s.labelsAt != c.wantAt {
			t.Errorf("%s: %q at %d, want %q at %d", c.name, s.labels[1].Label, s.labelsAt, c.want, c.wantAt)
		}
	}
}

// A look that marked a rename gives the resume points passed (all
// before its mark) its labels, so that a run started again from one of
// them, which meets the mark, does not find the rename again; a
// database with more values than a point keeps gives them none.
func TestTheResumePointsBeforeARelabelMarkTakeItsLabels(t *testing.T) {
	s := &Source{points: []position{{LSN: "0/1"}, {LSN: "0/2", Labels: map[uint32]enumLabel{1: {Type: 10, Label: "sad"}}, LabelsAt: 5}}}
	s.markedPoints(map[uint32]enumLabel{1: {Type: 10, Label: "blue"}}, 9)
	for _, p := range s.points {
		if p.Labels[1].Label != "blue" || p.LabelsAt != 9 {
			t.Fatalf("%s: %v at %d, want blue at 9", p.LSN, p.Labels, p.LabelsAt)
		}
	}
	many := map[uint32]enumLabel{}
	for i := range maxKeptLabels + 1 {
		many[uint32(i)] = enumLabel{Type: 10, Label: "v"}
	}
	s.markedPoints(many, 11)
	if s.points[0].Labels != nil || s.points[0].LabelsAt != 11 {
		t.Fatalf("%d labels kept in a resume point, at most %d", len(s.points[0].Labels), maxKeptLabels)
	}
}

// A new changefeed's first resume point holds the database's enum
// labels, read after its slot was made, with the database's clock then:
// its reader's first look compares with them, so a value renamed
// between the changefeed's creation and that look (while its snapshot
// copies) is seen.
func TestANewChangefeedsFirstResumePointHoldsTheEnumLabels(t *testing.T) {
	t.Parallel()
	_, dsn := newDB(t, `CREATE TYPE mood AS ENUM ('ok', 'sad'); CREATE TYPE size AS ENUM ('s');
		CREATE TABLE m (id int8 PRIMARY KEY, v mood)`)
	before := time.Now()
	_, pos, err := Pin(context.Background(), dsn+"&tables=public.m", "labels-pinned", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var p position
	if err := json.Unmarshal(pos, &p); err != nil {
		t.Fatal(err)
	}
	byType := map[uint32][]string{}
	for _, l := range p.Labels {
		byType[l.Type] = append(byType[l.Type], l.Label)
	}
	var got [][]string
	for _, labels := range byType {
		slices.Sort(labels)
		got = append(got, labels)
	}
	slices.SortFunc(got, func(a, b []string) int { return len(b) - len(a) })
	if len(got) != 2 || !slices.Equal(got[0], []string{"ok", "sad"}) || !slices.Equal(got[1], []string{"s"}) {
		t.Fatalf("the first resume point's labels by enum: %v, want [ok sad] and [s]", got)
	}
	if at := time.UnixMicro(p.LabelsAt); at.Before(before.Add(-time.Minute)) || at.After(time.Now().Add(time.Minute)) {
		t.Fatalf("labels read at %v, the changefeed created at %v", at, before)
	}
}

// A value renamed after a new changefeed's rows were copied and before
// its reader's first look at the catalog is seen by that look: it
// compares with the labels read when the changefeed was created (its
// first resume point's), where before it only learnt them, and the
// copied rows kept the old label. Here the copy is done by a reader that
// never looks, the value renamed once it stopped, and a second reader
// started from the first resume point copies the table again.
func TestAValueRenamedBeforeTheFirstLookIsSeenByIt(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TYPE mood AS ENUM ('ok', 'sad');
		CREATE TABLE m (id int8 PRIMARY KEY, v mood);
		INSERT INTO m SELECT g, (CASE WHEN g % 2 = 0 THEN 'sad' ELSE 'ok' END)::mood FROM generate_series(1, 500) g`)
	const cf = "relabel-first-look"
	stored, pos, err := Pin(context.Background(), dsn+"&tables=public.m", cf, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	whole := model.Span{Table: "public.m", Key: "int8"}
	first := pullFrom(t, stored, pos, cf, func(s *Source) { s.dropEvery = time.Hour })
	p := first.run(whole, first.start, model.CopyProgress{})
	p.waitDone(t)
	at, copied := p.stopAt(t)
	if v := lastValue(p.stopped(t), "2"); v != "sad" {
		t.Fatalf("row 2 copied as %q, want sad", v)
	}
	first.stop(t)

	psql(t, srv, dsn, `ALTER TYPE mood RENAME VALUE 'sad' TO 'blue'`)
	second := pullFrom(t, stored, pos, cf, func(s *Source) { s.dropEvery = 100 * time.Millisecond })
	again := second.run(whole, at, copied)
	again.waitCopiedAgain(t, 1)
	evs := again.stopped(t)
	for _, key := range []string{"2", "500"} {
		if v := lastValue(evs, key); v != "blue" {
			t.Fatalf("row %s last read as %q, want blue", key, v)
		}
	}
}

// lastValue is the second column's text in the last row of key read.
func lastValue(evs []source.Event, key string) string {
	v := ""
	for i := range evs {
		if e := &evs[i]; e.Kind == source.KindDML && textKey(e) == key && len(e.New) > 1 {
			v = e.New[1].Text
		}
	}
	return v
}
