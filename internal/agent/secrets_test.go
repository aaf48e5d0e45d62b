package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka/kafkatest"
)

// A credential in a sink URI is kept (the sink needs it) but never shown:
// not by changefeed list or get, not in an error body, not in a log line.
func TestSinkCredentialsAreNeverShown(t *testing.T) {
	const secret = "S3CR3T-pw"
	kc, err := kafkatest.Start(1, "demo", 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	tc := newTestCluster(t)
	tc.tail.forbid(secret)
	tc.startCaptures(1)
	c := tc.client()
	ctx := context.Background()

	sinkURI := fmt.Sprintf("kafka://cdc:%s@%s/demo?sasl-password=%s", secret, kc.Addrs(), secret)
	_, err = c.CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "demo", Source: "gen://?tables=2&keys=10&rate=50", Sink: sinkURI})
	if err != nil && strings.Contains(err.Error(), secret) {
		t.Fatalf("the create error shows the secret: %v", err)
	}
	for _, bad := range []string{
		"kafka://cdc:" + secret + "@127.0.0.1:1/t?dial-timeout=300ms", // unreachable
		"kafka://cdc:" + secret + "@h/t?no-such-parameter=1",          // refused
		"kafka://cdc:" + secret + "@h:1/a/b",                          // two topics
		"ftp://cdc:" + secret + "@h/x",                                // unknown scheme
	} {
		_, err := c.CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "bad", Source: "gen://", Sink: bad})
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Fatalf("creating with %s: %v; want an error that does not show the secret", strings.Split(bad, "?")[0], err)
		}
	}

	if _, err := c.CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "shown", Source: "gen://?tables=1&keys=10&rate=50",
		Sink: fmt.Sprintf("kafka://cdc:%s@%s/demo", secret, kc.Addrs())}); err != nil {
		t.Fatalf("a reachable sink with credentials: %v", err)
	}
	addr := tc.nodes["capture-1"].addr
	for _, path := range []string{"/api/v2/changefeeds", "/api/v2/changefeeds/shown", "/api/v2/snapshot", "/api/v2/plans"} {
		body := tc.get(addr, path)
		if strings.Contains(body, secret) {
			t.Fatalf("GET %s shows the secret:\n%s", path, body)
		}
	}
	if body := tc.get(addr, "/api/v2/changefeeds/shown"); !strings.Contains(body, "cdc:xxxxx@") {
		t.Fatalf("the sink is not shown with its password masked:\n%s", body)
	}
	time.Sleep(time.Second) // the changefeed starts: its logs too
	if leaks := tc.tail.leaked(); len(leaks) > 0 {
		t.Fatalf("%d log lines show the secret, e.g.:\n%s", len(leaks), leaks[0])
	}
}
