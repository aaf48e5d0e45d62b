package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/certs"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Issue 14, TLS: three agents with --tls-* serve the API and the
// node-to-node transport over TLS and verify each other (mutual TLS on
// the real gRPC transport, not the in-memory hub). A changefeed created
// through a follower (forwarded over https) replicates: heartbeats and
// hand-overs travel the transport. A client that does not trust the CA,
// and plain http, are refused. And one agent cannot speak for another: a
// message sent with capture-3's certificate as capture-1 is refused.
func TestAgentsSpeakTLSAndProveWhoSends(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := certs.NewCA("test-cluster")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]certs.Files{}
	for _, id := range []string{"capture-1", "capture-2", "capture-3"} {
		if files[id], err = ca.WriteAgent(dir, id, "127.0.0.1", "localhost"); err != nil {
			t.Fatal(err)
		}
	}
	tc := newTestCluster(t)
	tc.hub = nil // the real gRPC transport
	tc.tls = func(id string) certs.Files { return files[id] }
	leader := tc.startCaptures(3)

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	var follower string
	for id, rn := range tc.nodes {
		if id != leader.Node {
			follower = "https://" + rn.addr
		}
	}
	c, err := api.NewClient([]string{follower}, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetTLS(&tls.Config{RootCAs: pool})
	ctx := context.Background()
	sink := "file://" + filepath.Join(dir, "sink") + "?flush-interval=200ms"
	if _, err := c.CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "demo", Source: "gen://?tables=2&keys=20&rate=100", Sink: sink, PartitionsPerTable: 2}); err != nil {
		t.Fatalf("create through a follower over TLS: %v", err)
	}
	want := model.TsFromTime(time.Now().Add(2 * time.Second))
	tc.eventually("the checkpoint passes creation + 2 s (progress travels the TLS transport)", 60*time.Second, func() bool {
		cf, err := c.Changefeed(ctx, "demo")
		return err == nil && model.Ts(cf.CheckpointTs) > want
	})

	// A client that trusts another CA, and plain http, are refused.
	other, err := certs.NewCA("someone-else")
	if err != nil {
		t.Fatal(err)
	}
	otherPool := x509.NewCertPool()
	otherPool.AppendCertsFromPEM(other.PEM)
	stranger, _ := api.NewClient([]string{follower}, 5*time.Second)
	stranger.SetTLS(&tls.Config{RootCAs: otherPool})
	if _, err := stranger.Captures(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client that does not trust the cluster's CA: %v; want a certificate error", err)
	}
	resp, err := http.Get("http://" + strings.TrimPrefix(follower, "https://") + "/api/v2/captures")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain http was served by an agent with TLS")
		}
	}

	// capture-3's certificate, sending as capture-1: refused.
	target := leader.Node
	if target == "capture-3" || target == "capture-1" {
		target = "capture-2"
	}
	forger := transport.NewGRPC("capture-1", func(id model.NodeID) (string, bool) {
		rn, ok := tc.nodes[id]
		if !ok {
			return "", false
		}
		return rn.addr, true
	})
	defer forger.Close()
	cert, err := tls.LoadX509KeyPair(files["capture-3"].Cert, files["capture-3"].Key)
	if err != nil {
		t.Fatal(err)
	}
	forger.UseTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool})
	msg, err := transport.NewMessage("capture-1", target, transport.TopicHeartbeat, transport.Heartbeat{Changefeed: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	err = forger.Send(ctx, msg)
	if err == nil || !strings.Contains(err.Error(), "certificate names \"capture-3\"") {
		t.Fatalf("a message as capture-1 under capture-3's certificate: %v; want it refused", err)
	}
	// The same message under capture-1's own certificate goes through.
	own, err := tls.LoadX509KeyPair(files["capture-1"].Cert, files["capture-1"].Key)
	if err != nil {
		t.Fatal(err)
	}
	honest := transport.NewGRPC("capture-1", func(id model.NodeID) (string, bool) { return tc.nodes[id].addr, true })
	defer honest.Close()
	honest.UseTLS(&tls.Config{Certificates: []tls.Certificate{own}, RootCAs: pool})
	if err := honest.Send(ctx, msg); err != nil && !errors.Is(err, transport.ErrUnreachable) {
		t.Fatalf("capture-1's own certificate: %v", err)
	} else if err != nil {
		t.Fatalf("capture-1's own certificate was refused: %v", err)
	}
}
