package storage_test

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

// The storage sink on Google Cloud Storage, against fake-gcs-server (the
// GCS JSON API in process, on loopback), reached the way an operator
// reaches an emulator: STORAGE_EMULATOR_HOST.
func TestStorageSinkOnGCS(t *testing.T) {
	// The client reads objects through the XML API at the emulator's
	// address, which the server serves only under its PublicHost: so the
	// port is chosen first.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{Scheme: "http", Host: "127.0.0.1", Port: uint16(port),
		PublicHost: fmt.Sprintf("127.0.0.1:%d", port)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "cdc"})
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(srv.URL(), "http://"))
	uri := "gs://cdc/changefeeds/demo?flush-interval=50ms&protocol=canal-json"

	roundTrip(t, uri, 3)
	if _, err := srv.GetObject("cdc", "changefeeds/demo/metadata"); err != nil {
		t.Fatalf("metadata file not in the bucket under the prefix: %v", err)
	}
	_, err = storageOpen("gs://missing/x")
	if err == nil || !strings.Contains(err.Error(), "not accessible") {
		t.Fatalf("missing bucket: %v", err)
	}
}
