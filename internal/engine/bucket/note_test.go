package bucket_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/bucket"
	"github.com/cdcctl/cdcctl/internal/engine/bucket/buckettest"
)

// An object's note is written with it and read back without it, on a
// local directory (an extended attribute), on S3 (gofakes3: object
// metadata) and in memory; an object written without one has none, and
// a missing object is told apart from both.
func TestANoteTravelsWithItsObject(t *testing.T) {
	s3 := buckettest.Start(t)
	s3URL := strings.Replace(s3.URI("x", ""), "s3://cdc/x?", "s3://cdc?", 1)
	for _, url := range []string{"file://" + t.TempDir(), s3URL, "mem://"} {
		ctx := context.Background()
		b, err := bucket.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if !b.KeepsNotes(ctx) {
			if strings.HasPrefix(url, "file://") {
				t.Logf("this file system keeps no extended attributes: notes not tried")
				b.Close()
				continue
			}
			t.Fatalf("%s keeps no notes", url)
		}
		note := `{"end":{"ts":42},"files":["db/t1/1/CDC_p0.1_000007.json"]}`
		if err := b.PutWith(ctx, "db/t1/1/CDC_p0.1_000007.json", [][]byte{[]byte("row\n")}, bucket.Options{Note: note}); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		if err := b.Put(ctx, "db/t1/1/plain.json", [][]byte{[]byte("row\n")}, false); err != nil {
			t.Fatal(err)
		}
		if got, found, err := b.Note(ctx, "db/t1/1/CDC_p0.1_000007.json"); err != nil || !found || got != note {
			t.Fatalf("%s: note %q (found %v, %v); want %q", url, got, found, err, note)
		}
		if body, err := b.ReadAll(ctx, "db/t1/1/CDC_p0.1_000007.json"); err != nil || string(body) != "row\n" {
			t.Fatalf("%s: the noted object reads %q (%v)", url, body, err)
		}
		if got, found, err := b.Note(ctx, "db/t1/1/plain.json"); err != nil || !found || got != "" {
			t.Fatalf("%s: an object without a note: %q (found %v, %v)", url, got, found, err)
		}
		if _, found, err := b.Note(ctx, "db/t1/1/CDC_p0.1_000008.json"); err != nil || found {
			t.Fatalf("%s: a missing object found %v (%v)", url, found, err)
		}
		if err := b.PutFromWith(ctx, "db/t1/1/long.json", bytes.NewReader(nil), bucket.Options{Note: strings.Repeat("x", bucket.MaxNote+1)}); err == nil {
			t.Fatalf("%s: a note longer than object stores keep was accepted", url)
		}
		b.Close()
	}
}
