package storage_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/model"
)

// The storage sink on S3, against gofakes3 (a real S3 protocol server in
// process): the same layout, read back by verify through the same URI.
func TestStorageSinkOnS3(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("cdc"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	defer srv.Close()
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	params := "endpoint=" + srv.URL + "&use_path_style=true&disable_https=true&region=us-east-1"
	uri := "s3://cdc/changefeeds/demo?" + params + "&flush-interval=50ms&protocol=csv"

	roundTrip(t, uri, 2)
	if obj, err := backend.HeadObject("cdc", "changefeeds/demo/metadata"); err != nil || obj == nil {
		t.Fatalf("metadata file not in the bucket under the prefix: %v", err)
	}

	// A bucket that does not exist is refused when the sink opens.
	_, err := storageOpen("s3://missing?" + params)
	if err == nil || !strings.Contains(err.Error(), "not accessible") {
		t.Fatalf("missing bucket: %v", err)
	}
}

// roundTrip writes two tables through the sink at uri as one dispatcher
// per table, flushes, records the checkpoint, and proves with verify that
// the bucket holds every event once.
func roundTrip(t *testing.T, uri string, seed uint64) {
	t.Helper()
	s := open(t, uri)
	g := newGen(t, gen.Config{Tables: 2, Keys: 40, Rate: 400, Seed: seed})
	upTo := model.TsFromMillis(start + 2000)
	var a acks
	total := 0
	for _, table := range g.TableNames() {
		total += feed(t, s, g, model.Span{Table: table}, table+"-p1.1", upTo, &a)
		if err := s.Flush(context.Background(), table+"-p1.1"); err != nil {
			t.Fatal(err)
		}
	}
	checkpointAndVerify(t, s, g, uri, upTo, total, &a)
}
