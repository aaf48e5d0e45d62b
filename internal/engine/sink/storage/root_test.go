package storage_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
)

// An API caller names a file:// sink; the agent writes only under its
// sink root: not /etc, not through "..", not through a symbolic link
// that leads out.
func TestFileSinksStayUnderTheSinkRoot(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "sinks")
	if err := os.MkdirAll(filepath.Join(root, "existing"), 0o755); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(base, "elsewhere")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(root, filepath.Join(base, "alias")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		uri string
		ok  bool
	}{
		{"file://" + root + "/demo?flush-interval=1s", true},
		{"file://" + root + "/existing/a/b", true},
		{"file://" + base + "/alias/demo", true}, // a link into the root
		{"file://" + root, true},
		{"file:///etc/cdc-test-sink", false},
		{"file://" + root + "/../elsewhere", false},
		{"file://" + root + "/demo/../../elsewhere", false},
		{"file://" + root + "/link/demo", false}, // a link out of the root
		{"file://" + root + "x/demo", false},     // a sibling with the root as prefix
		{"s3://bucket/prefix", true},             // not a local directory
	} {
		err := storage.CheckRoot(tc.uri, root)
		if tc.ok && err != nil {
			t.Errorf("%s: refused: %v", tc.uri, err)
		}
		if !tc.ok && !errors.Is(err, storage.ErrOutsideRoot) {
			t.Errorf("%s: %v; want it refused as outside the sink root", tc.uri, err)
		}
	}
}
