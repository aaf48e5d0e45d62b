package changefeeds

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// orderedShop is how many orders and items these tests' shops hold: a
// third of the other snapshot tests' (CI's time on this package).
const orderedShop = 2000

// A key's collation changed while its table copies in the key's index
// order (utf8mb4_general_ci, case folded, to utf8mb4_bin: 'SKU-…' now
// before 'Sku-…' and 'sku-…') moves rows behind the copy's cursor that
// it had not read yet, and the change rewrites none of them in the log:
// the partition reads its range again from its start, and no row is
// lost (the rows copied before arrive twice).
func TestAKeysCollationChangedWhileItsTableCopiesLosesNoRow(t *testing.T) {
	t.Parallel()
	tc, db := startShopOf(t, orderedShop, 20)
	var pid string
	tc.Eventually("a partition of items copying in its key's index order", 60*time.Second, func() bool {
		st := tc.State()
		for _, r := range st.Partitions["my"] {
			if c := st.Progress["my"][r.Route.ID].Progress.Copy; r.Route.Span.Table == "shop.items" && c.Cursor != "" && !c.Done {
				pid = r.Route.ID
				return true
			}
		}
		return false
	})
	saved := tc.State().Progress["my"][pid].Progress.Copy
	if _, err := db.Exec(`ALTER TABLE items MODIFY sku VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s copied %d rows (read %d) in order %s when the collation changed", pid, saved.Rows, saved.Read, saved.Order)
	tc.WaitSnapshot("my")
	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep := tc.VerifyDatabase("my", up, []string{"shop.items"}, time.Now()); !rep.OK {
		t.Fatalf("after the collation of items' key changed mid-copy: %+v", rep)
	}
}

// A large table keyed by a VARCHAR under a collation that folds case is
// cut into partitions at keys read in the index's order (each quantile
// a walk of the index, not a cast and a sort of the table), put in
// their bytes' order: increasing, each a key of the table.
func TestACharacterKeyedTableIsCutAtKeysOfItsIndex(t *testing.T) {
	t.Parallel()
	cuts, db, _ := cutsOf(t, "c",
		`CREATE TABLE c (k VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)`,
		`INSERT INTO c SELECT CONCAT(ELT(seq % 3 + 1, 'sku-', 'SKU-', 'Sku-'), seq), seq FROM seq_1_to_120000`)
	if len(cuts) != 3 || !slices.IsSorted(cuts) || len(slices.Compact(slices.Clone(cuts))) != 3 {
		t.Fatalf("cuts %q: want 3, increasing", cuts)
	}
	for _, c := range cuts {
		k := model.DecodeKey("text", c)
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM c WHERE k = BINARY ?`, k).Scan(&n); err != nil || n != 1 {
			t.Fatalf("cut %q is not a key of the table: %d, %v", k, n, err)
		}
	}
}

// A partition of items (a case-mixed VARCHAR key) split while it copies
// in its key's index order, under a workload: both halves read on from
// its cursor, each keeping its own range's rows, and the tables rebuilt
// from the sink equal MariaDB's, no row twice.
func TestAPartitionCopyingInIndexOrderIsSplitUnderLoad(t *testing.T) {
	t.Parallel()
	tc, db := startShopOf(t, orderedShop, 20)
	w := startShopWorkload(t, db, orderedShop)
	var items model.RouteEntry
	tc.Eventually("a partition of items copying in its key's index order", 60*time.Second, func() bool {
		st := tc.State()
		for _, r := range st.Partitions["my"] {
			if c := st.Progress["my"][r.Route.ID].Progress.Copy; r.Route.Span.Table == "shop.items" && c.Cursor != "" && !c.Done {
				items = r.Route
				return true
			}
		}
		return false
	})
	var at string
	snap := tc.State().Snapshot()
	for _, k := range []string{"SKU-25,0", "Sku-25,0", "sku-25,0", "SKU-5,0", "Sku-5,0", "sku-5,0"} {
		if _, err := plan.Split(&snap, items.ID, k, plan.DefaultCosts); err == nil {
			at = k
			break
		}
	}
	if at == "" {
		t.Fatalf("no split key inside %s's span %s", items.ID, items.Span.String())
	}
	tc.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) { return plan.Split(s, items.ID, at, plan.DefaultCosts) })
	if s := tc.CopySummary("my"); !strings.HasPrefix(s, "copying: ") {
		t.Logf("the snapshot was %q by the time the split ended", s)
	}
	tc.WaitSnapshot("my")
	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("my", up, []string{"shop.orders", "shop.items"}, w.finish(t))
	if !rep.OK || rep.Duplicates != 0 || w.n < 10 {
		t.Fatalf("after %d transactions and a split of %s at %s mid-copy: %+v", w.n, items.ID, at, rep)
	}
	// An existing item (its line at most orderedShop) is inserted once,
	// by its copy: the half above the split read on from the cursor, not
	// from its start again.
	twice := 0
	for k, by := range tc.Inserts("my", "shop.items") {
		line, _ := strconv.Atoi(k[strings.LastIndex(k, ",")+1:])
		if line <= orderedShop && len(by) > 1 {
			twice++
			if twice <= 3 {
				t.Errorf("item %s was copied %d times: by %v", k, len(by), by)
			}
		}
	}
	t.Logf("%d transactions; split %s at %s; %d existing items copied twice; %+v", w.n, items.ID, at, twice, rep.TableReports)
}
