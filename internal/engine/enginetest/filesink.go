package enginetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FileSinkHolds says whether a file:// sink (its directory) holds text
// in one of a table's files (dirs: the table's path under the sink,
// "public", "orders"): in its schema files (meta/schema_*.json, where
// schema changes such as its DROP TABLE are) or, with schema false, in
// its data files.
func FileSinkHolds(t testing.TB, sink string, schema bool, text string, dirs ...string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(filepath.Join(append([]string{sink}, dirs...)...), func(path string, d os.DirEntry, err error) error {
		if os.IsNotExist(err) {
			return filepath.SkipAll
		}
		inMeta := strings.Contains(path, string(filepath.Separator)+"meta"+string(filepath.Separator))
		if err != nil || d.IsDir() || found || inMeta != schema {
			return err
		}
		b, err := os.ReadFile(path)
		found = strings.Contains(string(b), text)
		return err
	})
	if err != nil {
		t.Fatalf("read the sink's files of %s: %v", filepath.Join(dirs...), err)
	}
	return found
}
