package storage_test

import (
	"context"
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
		// A disk spool's directory, whatever the scheme, is held too.
		{"file://" + root + "/demo?spool=disk&spool-dir=" + root + "/spool/deep", true},
		{"s3://bucket/p?spool=disk&spool-dir=" + root + "/existing", true},
		{"file://" + root + "/demo?spool=disk&spool-dir=/anywhere/deep/er", false},
		{"s3://bucket/p?spool=disk&spool-dir=" + outside, false},
		{"gs://bucket/p?spool=disk&spool-dir=" + root + "/link/spool", false}, // through a link out
		{"file://" + root + "/demo?spool=disk&spool-dir=" + root + "/../elsewhere", false},
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

// What a create probes and then refuses, or a probe that fails, leaves
// nothing on disk; a disk spool removes the spool-dir it created when it
// closes (a removed changefeed leaves nothing of its spool).
func TestAProbeAndASpoolLeaveNothingBehind(t *testing.T) {
	base := t.TempDir()
	ctx := context.Background()
	// A bucket parameter the opener refuses, after the sink's directory
	// would have been made.
	bad := "file://" + base + "/a/b/c?password=SUPERSECRET"
	if _, err := storage.Probe(ctx, bad, nil, storage.Env{}); err == nil {
		t.Fatal("a refused bucket parameter was accepted")
	}
	if _, err := os.Stat(filepath.Join(base, "a")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed probe left %s/a: %v", base, err)
	}
	// A probe that passes, then a create refused after it.
	undo, err := storage.Probe(ctx, "file://"+base+"/x/y?spool=disk&spool-dir="+base+"/s/t", nil, storage.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "x", "y")); err != nil {
		t.Fatalf("the probe did not open the sink's directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "s")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the probe's closed spool left its spool-dir: %v", err)
	}
	undo()
	if entries, _ := os.ReadDir(base); len(entries) != 0 {
		t.Fatalf("after undo, %s holds %v", base, entries)
	}
	// A spool-dir that existed stays; only what was made goes.
	if err := os.Mkdir(filepath.Join(base, "spools"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := storage.Open(ctx, "mem://?spool=disk&spool-dir="+base+"/spools/cf/deep", nil)
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(base, "spools", "cf", "deep")); len(entries) != 1 {
		t.Fatalf("the open spool: %v", entries)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(base, "spools")); len(entries) != 0 {
		t.Fatalf("the closed spool left %v in the spool-dir's existing parent", entries)
	}
}
