package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka/kafkatest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/redact"
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
	tc.tail.Forbid(secret)
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
	if leaks := tc.tail.Leaked(); len(leaks) > 0 {
		t.Fatalf("%d log lines show the secret, e.g.:\n%s", len(leaks), leaks[0])
	}
}

// Issue 33: a sink URI the bucket opener refuses was echoed whole in the
// 400 body, with every secret in it. Each secret-like parameter of each
// scheme, through a refused create at the coordinator and through a
// follower (which forwards it): the body, the error the client shows
// and the agents' logs never hold the secret, and nothing is created on
// disk. A spool-dir outside the sink root, or through a link that leads
// out of it, is refused the same way.
func TestRefusedCreatesShowNoSecretAndLeaveNothingOnDisk(t *testing.T) {
	t.Parallel()
	const secret = "SUPERSECRETB7"
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	tc := newTestCluster(t)
	tc.sinkRoot = root
	tc.tail.Forbid(secret)
	leader := tc.startCaptures(2)
	addrs := map[string]string{"coordinator": tc.nodes[leader.Node].addr, "follower": tc.nodes[tc.followerOf(leader.Node)].addr}

	var refused []string
	for _, param := range []string{"password", "token", "secret", "access_key", "secret_access_key", "sas_token", "sig", "account_key", "api_key", "credential"} {
		refused = append(refused,
			"file://"+root+"/cf-"+param+"/deep?"+param+"="+secret,
			"s3://bucket/p?region=us-east-1&endpoint=http://127.0.0.1:1&"+param+"="+secret,
			"mem://?"+param+"="+secret,
			"kafka://127.0.0.1:1/t?"+param+"="+secret)
	}
	refused = append(refused,
		"kafka://cdc:"+secret+"@127.0.0.1:1/t?dial-timeout=200ms",
		"file://"+root+"/spooled?spool=disk&spool-dir="+base+"/anywhere/deep/er&password="+secret,
		"file://"+root+"/spooled?spool=disk&spool-dir="+root+"/link/deep&token="+secret,
		"file://"+outside+"/cf?password="+secret)
	for _, sinkURI := range refused {
		for where, addr := range addrs {
			body, _ := json.Marshal(api.ChangefeedCreateRequest{ID: "refused", Source: "gen://?tables=1", Sink: sinkURI})
			resp, err := http.Post("http://"+addr+"/api/v2/changefeeds", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			shown := redact.URI(sinkURI)
			// (400, or 503 where the sink cannot be reached.)
			if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(got), secret) {
				t.Fatalf("create with %s at the %s: %s\n%s", shown, where, resp.Status, got)
			}
		}
	}
	// A source URI mistyped, its user info after one slash, or three, or
	// none: the parser sees a path (or an opaque part), the reader of
	// the error a password.
	for _, sourceURI := range []string{
		"mysql:/cdc:" + secret + "@127.0.0.1:1/shop?tables=a",
		"mysql:///cdc:" + secret + "@127.0.0.1:1/shop?tables=a",
		"postgres:/cdc:" + secret + "@127.0.0.1:1/shop?tables=a",
		"mysql:cdc:" + secret + "@127.0.0.1:1/shop?tables=a",
	} {
		body, _ := json.Marshal(api.ChangefeedCreateRequest{ID: "refused", Source: sourceURI, Sink: "file://" + root + "/src"})
		resp, err := http.Post("http://"+addrs["follower"]+"/api/v2/changefeeds", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(got), secret) {
			t.Fatalf("create from %s: %s\n%s", redact.URI(sourceURI), resp.Status, got)
		}
	}
	// The client's error, as cdcctl prints it.
	_, err := tc.client().CreateChangefeed(context.Background(), api.ChangefeedCreateRequest{ID: "x", Source: "gen://", Sink: refused[0]})
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "password=xxxxx") {
		t.Fatalf("the client's error: %v; want the parameter shown masked", err)
	}
	// Nothing was created: not the sinks' directories, not the spools'.
	for _, dir := range []string{root, outside} {
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			if e.Name() != "link" {
				names = append(names, e.Name())
			}
		}
		if len(names) > 0 {
			t.Errorf("refused creates left %v in %s", names, dir)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "anywhere")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a spool-dir outside the root was created: %v", err)
	}
	if leaks := tc.tail.Leaked(); len(leaks) > 0 {
		t.Fatalf("%d log lines show the secret, e.g.:\n%s", len(leaks), leaks[0])
	}
}

// What the engine stored about a changefeed quotes drivers' and openers'
// errors, and gocloud's quote the URL they refused with its secrets: a
// changefeed's error, its incidents and its table issues are shown masked.
func TestAChangefeedsStoredErrorsAreShownMasked(t *testing.T) {
	const quoted = `open bucket "s3://AKIAKEY:S3CRETKEY@b/p?secret_access_key=S3CRETKEY": no credentials`
	e := &meta.ChangefeedEntry{Info: model.ChangefeedInfo{ID: "cf", SourceURI: "postgres://u@h/db?tables=t&password=S3CRETKEY", SinkURI: "s3://AKIAKEY:S3CRETKEY@b/p"}}
	e.Status.Error = quoted
	e.Status.Incidents = []model.Incident{{Kind: "recovered", Err: quoted, Reason: quoted}}
	e.Status.Tables = []model.TableIssue{{Table: "t", State: model.TableHeld, Reason: quoted}}
	cf := changefeedOf(&meta.State{}, e)
	shown, _ := json.Marshal(struct {
		api.Changefeed
		Incidents []model.Incident
	}{cf, maskedIncidents(e.Status.Incidents)})
	if strings.Contains(string(shown), "S3CRETKEY") || !strings.Contains(string(shown), "no credentials") {
		t.Fatalf("shown: %s", shown)
	}
	if e.Status.Incidents[0].Err != quoted {
		t.Fatal("masking changed the stored incident")
	}
}
