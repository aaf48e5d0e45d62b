// Package buckettest serves an S3 bucket for tests that can fill up.
package buckettest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	_ "github.com/cdcctl/cdcctl/internal/engine/bucket/cloud" // the s3:// driver its users open it with
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// FullS3 is an S3 endpoint (gofakes3, the real protocol) with one bucket,
// "cdc", whose storage can fill up: while Full, every upload is refused
// the way MinIO refuses one when its drives reach their free-space
// threshold (507, XMinioStorageFull); reads go on.
type FullS3 struct {
	Full    atomic.Bool
	Refused atomic.Int64 // uploads refused
	// Unreadable refuses every GET (500 InternalError) while set: a
	// store that cannot serve reads for a moment.
	Unreadable atomic.Bool
	srv        *httptest.Server
}

// Start serves a FullS3 until the test ends.
func Start(t testing.TB) *FullS3 { return StartObserved(t, nil) }

// StartObserved is Start with every request shown to observe first.
func StartObserved(t testing.TB, observe func(*http.Request)) *FullS3 {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket("cdc"); err != nil {
		t.Fatal(err)
	}
	b := &FullS3{}
	s3 := gofakes3.New(backend).Server()
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if observe != nil {
			observe(r)
		}
		if b.Full.Load() && (r.Method == http.MethodPut || r.Method == http.MethodPost) {
			b.Refused.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusInsufficientStorage)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>XMinioStorageFull</Code><Message>Storage backend has reached its minimum free drive threshold. Please delete a few objects to proceed.</Message></Error>`)
			return
		}
		if b.Unreadable.Load() && r.Method == http.MethodGet {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>We encountered an internal error. Please try again.</Message></Error>`)
			return
		}
		s3.ServeHTTP(w, r)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// URI is a storage sink URI under prefix in the bucket; params are the
// sink's own (without a leading &). Its requests are not signed
// (anonymous: gofakes3 checks no signature), so a test need not set
// credentials in the environment, and may run in parallel.
func (b *FullS3) URI(prefix, params string) string {
	u := "s3://cdc/" + prefix + "?endpoint=" + b.srv.URL + "&use_path_style=true&disable_https=true&region=us-east-1&anonymous=true"
	if params != "" {
		u += "&" + params
	}
	return u
}
