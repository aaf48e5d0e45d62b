// Package bucket opens the gocloud.dev/blob buckets the engine writes to
// (storage sinks, the checkpoint store) and checks that they can be used
// before anything relies on them. It registers the drivers of file:// and
// mem://; the object stores' (s3://, gs://, azblob://) are in package
// cloud, which the cdc-agent command imports.
//
// It imports gocloud.dev/blob, and golang.org/x/sys for the notes of a
// file:// bucket's objects (note.go).
package bucket

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file://
	_ "gocloud.dev/blob/memblob"  // mem://
)

// Open opens a bucket URL and checks that the bucket is there and can be
// reached. A file:// directory is created if missing. Errors name the
// URL without its credentials or query; callers add what to do.
func Open(ctx context.Context, rawURL string) (*Bucket, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%q is not a URL: %v", rawURL, err)
	}
	sync := true
	if q := u.Query(); q.Has("fsync") {
		if u.Scheme != "file" {
			return nil, fmt.Errorf("fsync=%s: only a file:// bucket takes it (an object store makes an object durable itself); leave it out", q.Get("fsync"))
		}
		switch q.Get("fsync") {
		case "true":
		case "false":
			sync = false
		default:
			return nil, fmt.Errorf("fsync=%q: use true (the default: every object durable before it counts as written) or false (a scratch directory, a tmpfs)", q.Get("fsync"))
		}
		q.Del("fsync")
		u.RawQuery = q.Encode()
		rawURL = u.String()
	}
	if u.Scheme == "file" {
		if err := os.MkdirAll(u.Path, 0o755); err != nil {
			return nil, fmt.Errorf("directory %s: %w", u.Path, err)
		}
		// No .attrs sidecar beside every file: it doubled the files a
		// consumer sees and the sink writes, and nothing reads the
		// attributes it keeps (a content type).
		if q := u.Query(); !q.Has("metadata") {
			q.Set("metadata", "skip")
			u.RawQuery = q.Encode()
			rawURL = u.String()
		}
	}
	b, err := blob.OpenBucket(ctx, rawURL)
	if err != nil {
		return nil, fmt.Errorf("cannot open %s: %w", Redact(u), err)
	}
	ok, err := accessible(ctx, b, u)
	if err != nil || !ok {
		b.Close()
		if err == nil {
			err = errors.New("bucket does not exist")
		}
		return nil, fmt.Errorf("%s is not accessible: %v", Redact(u), err)
	}
	out := &Bucket{Bucket: b}
	if u.Scheme == "file" {
		out.dir = newDirWrites(u.Path, sync)
	}
	return out, nil
}

// accessible says whether the bucket is there. A file:// bucket is its
// directory: gocloud's IsAccessible lists it, and fileblob's listing walks
// the tree and fails with "not found" when a file vanishes during the walk
// — which the sink's own temporary files under .cdcctl-tmp/ (walked
// first) do all the time while it writes. So a verify or a second sink
// opening a busy directory was told the bucket did not exist.
func accessible(ctx context.Context, b *blob.Bucket, u *url.URL) (bool, error) {
	if u.Scheme == "file" {
		fi, err := os.Stat(u.Path)
		if err != nil {
			return false, err
		}
		if !fi.IsDir() {
			return false, fmt.Errorf("%s is not a directory", u.Path)
		}
		return true, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return b.IsAccessible(cctx)
}

// Redact is a bucket URL fit for messages: no credentials, no query.
func Redact(u *url.URL) string {
	c := *u
	c.RawQuery = ""
	c.User = nil
	return c.String()
}
