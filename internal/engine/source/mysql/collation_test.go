package mysql_test

import (
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
)

// A key's collation changed while its table copies in the key's index
// order (utf8mb4_general_ci, case folded, to utf8mb4_bin: 'SKU-…' now
// before 'Sku-…' and 'sku-…') moves rows behind the copy's cursor that
// it had not read yet, and the change rewrites none of them in the log:
// the partition reads its range again from its start, and no row is
// lost (the rows copied before arrive twice).
func TestAKeysCollationChangedWhileItsTableCopiesLosesNoRow(t *testing.T) {
	t.Parallel()
	tc, db := startExistingShop(t, 20)
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
