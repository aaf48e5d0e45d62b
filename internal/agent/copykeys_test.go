package agent

import (
	"maps"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	sources "github.com/cdcctl/cdcctl/internal/engine/source/registry"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Partitions of one table that copied it by different primary keys (its
// key moved while it copied, and some had finished under the old one)
// are told to the operator with the fix; one key each is nothing to say.
func TestATableCopiedUnderDifferentKeysIsTold(t *testing.T) {
	got := copiedUnderKeys(map[string][]string{"public.c": {"(y)", "(x)"}, "public.d": {"(id)"}})
	if len(got) != 1 || !strings.Contains(got[0], "public.c: its partitions copied it by different primary keys ((x) and (y))") ||
		!strings.Contains(got[0], "--copy-table public.c") {
		t.Fatalf("warnings %q", got)
	}
	if got := copiedUnderKeys(map[string][]string{"public.d": {"(id)"}}); len(got) != 0 {
		t.Fatalf("warnings %q", got)
	}
}

// What changefeed get asks the source about each table still copying:
// the key its partitions were cut on and copy by; a partition that has
// copied nothing yet goes by the key its span was cut on, or (a span cut
// before spans kept it) the key its table's others copied by.
func TestTheTablesStillCopyingCarryTheKeyTheirCopyGoesBy(t *testing.T) {
	spans := map[string]model.Span{
		"c.1": {Table: "public.c", Key: "int4"}, "c.2": {Table: "public.c", Key: "int4"},
		"d.1": {Table: "public.d", Key: "int8"}, "e.1": {Table: "public.e", Key: "int4"},
		"f.1": {Table: "public.f", Key: "int4", KeyColumns: "(a)"}, "f.2": {Table: "public.f", Key: "int4", KeyColumns: "(a)"},
	}
	pt := model.ProgressTable{
		"c.1": {Copy: model.CopyProgress{Done: true, Key: "(x)"}}, "c.2": {},
		"d.1": {Copy: model.CopyProgress{To: "k\x00", Key: "(id)"}}, "e.1": {Copy: model.CopyProgress{Done: true, Key: "(id)"}},
		"f.1": {}, "f.2": {},
	}
	still, keys := source.CopyingTables(spans, pt)
	want := map[string]sources.CopyingTable{"public.c": {KeyTypes: "int4", KeyColumns: "(x)"}, "public.d": {KeyTypes: "int8", KeyColumns: "(id)"},
		"public.f": {KeyTypes: "int4", KeyColumns: "(a)"}}
	if !maps.Equal(still, want) || len(keys) != 3 {
		t.Fatalf("still %+v, keys %v", still, keys)
	}
}
