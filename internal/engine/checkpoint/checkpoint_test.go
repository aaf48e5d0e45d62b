package checkpoint

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/cdcctl/cdcctl/internal/embedetcd/etcdtest"
	_ "github.com/cdcctl/cdcctl/internal/engine/bucket/cloud" // s3://
	"github.com/cdcctl/cdcctl/internal/engine/meta"
)

// Every implementation keeps what was saved, by changefeed and partition,
// says ErrNotFound for what was not, and overwrites on a second save.
func exercise(t *testing.T, s Store) {
	t.Helper()
	ctx := context.Background()
	if _, _, err := s.Load(ctx, "demo", "p1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("load before save: %v, want ErrNotFound", err)
	}
	if err := s.Save(ctx, "demo", "p1", 3, []byte(`{"version":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, "other", "p1", 9, []byte("other")); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, "demo", "p1", 4, []byte(`{"version":1,"x":2}`)); err != nil {
		t.Fatal(err)
	}
	state, epoch, err := s.Load(ctx, "demo", "p1")
	if err != nil || epoch != 4 || string(state) != `{"version":1,"x":2}` {
		t.Fatalf("load: %q epoch %d, %v", state, epoch, err)
	}
	// Forgetting a changefeed deletes its states, and only its own.
	if err := s.Save(ctx, "demo", "p2", 1, []byte("p2")); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget(ctx, "demo"); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []string{"p1", "p2"} {
		if _, _, err := s.Load(ctx, "demo", pid); !errors.Is(err, ErrNotFound) {
			t.Fatalf("demo/%s after Forget: %v, want ErrNotFound", pid, err)
		}
	}
	if state, _, err := s.Load(ctx, "other", "p1"); err != nil || string(state) != "other" {
		t.Fatalf("another changefeed's state after Forget: %q, %v", state, err)
	}
	if err := s.Forget(ctx, "demo"); err != nil {
		t.Fatalf("Forget again: %v", err)
	}
}

func TestEtcdStore(t *testing.T) {
	_, cli := etcdtest.Start(t)
	store := meta.NewStore(cli, "test")
	exercise(t, Etcd{Store: store})
	// Outside the cluster's root: the watched view never loads states.
	st, err := store.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Partitions) != 0 || len(st.Changefeeds) != 0 {
		t.Fatalf("states leaked into the cluster state: %+v", st)
	}
}

func TestBlobStoreOnFileAndS3(t *testing.T) {
	ctx := context.Background()
	b, err := OpenBlob(ctx, "file://"+t.TempDir()+"/states", "test")
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, b)
	b.Close()

	backend := s3mem.New()
	if err := backend.CreateBucket("cdc"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	defer srv.Close()
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	params := "endpoint=" + srv.URL + "&use_path_style=true&disable_https=true&region=us-east-1"
	s3, err := OpenBlob(ctx, "s3://cdc?"+params, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	exercise(t, s3)
	if obj, err := backend.HeadObject("cdc", "test/other/p1.json"); err != nil || obj == nil {
		t.Fatalf("the state is not in the bucket as test/other/p1.json: %v", err)
	}
	// A bucket that does not exist is refused at start, naming the fix.
	if _, err := OpenBlob(ctx, "s3://missing?"+params, "test"); err == nil || !strings.Contains(err.Error(), "not accessible") {
		t.Fatalf("missing bucket: %v", err)
	}
}
