package agent

import (
	"strings"
	"testing"
)

// Partitions of one table that copied it by different primary keys (its
// key moved while it copied, and some had finished under the old one)
// are told to the operator with the fix; one key each is nothing to say.
func TestATableCopiedUnderDifferentKeysIsTold(t *testing.T) {
	got := copiedUnderKeys(map[string][]string{"public.c": {"(y)", "(x)"}, "public.d": {"(id)"}})
	if len(got) != 1 || !strings.Contains(got[0], "public.c: its partitions copied it by different primary keys ((x) and (y))") ||
		!strings.Contains(got[0], "--remove-table public.c") {
		t.Fatalf("warnings %q", got)
	}
	if got := copiedUnderKeys(map[string][]string{"public.d": {"(id)"}}); len(got) != 0 {
		t.Fatalf("warnings %q", got)
	}
}
