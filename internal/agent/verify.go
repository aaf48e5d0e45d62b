package agent

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	sources "github.com/cdcctl/cdcctl/internal/engine/source/registry"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// Verify reads what a changefeed's sink holds and proves it against its
// source: computed for a deterministic source (gen), compared with the
// upstream's tables for a database. It runs here, on whichever agent was
// asked, with the changefeed's own credentials, so the operator's tool
// links no sink or database client.
func (b backend) Verify(ctx context.Context, id string, req api.VerifyRequest) (*model.VerifyReport, error) {
	_, e, err := b.changefeed(ctx, id)
	if err != nil {
		return nil, err
	}
	src, err := sources.Open(ctx, e.Info.SourceURI, source.Env{Changefeed: e.Info.ID})
	if err != nil {
		return nil, unreadable(id, "its source", err)
	}
	defer src.Close()
	sinkURI := e.Info.SinkURI
	u, err := url.Parse(sinkURI)
	if err != nil {
		return nil, fmt.Errorf("changefeed %s: its sink URI does not parse: %w", id, err)
	}
	want, deterministic := src.(source.Expectation)
	if deterministic {
		upTo := e.Status.CheckpointTs
		var rep verify.Report
		switch u.Scheme {
		case "kafka":
			rep, err = verify.Kafka(ctx, want, sinkURI, upTo)
		case "file", "s3", "gs", "azblob":
			rep, err = verify.Storage(ctx, want, sinkURI, upTo)
		default:
			return nil, api.Errorf(api.CodeBadRequest, "verify a changefeed whose sink keeps what it wrote", "cannot verify a %s:// sink: it keeps nothing to read back (verify reads file://, s3://, gs://, azblob:// and kafka:// sinks)", u.Scheme)
		}
		if err != nil {
			return nil, unreadable(id, "its sink", err)
		}
		verify.JudgeDuplicates(&rep, sinkURI)
		return &rep, nil
	}
	up, tables, err := sources.Upstream(e.Info.SourceURI, "")
	if err != nil {
		return nil, unreadable(id, "its source", err)
	}
	if _, ok := up.(verify.Positioned); ok && (e.Status.State == model.ChangefeedPaused || e.Status.State == model.ChangefeedFailed) {
		// Its running reader names the point of the upstream's read
		// (mysql): stopped, it never will, however long --wait is.
		return nil, api.Errorf(api.CodeConflict, fmt.Sprintf("resume it ('cdcctl changefeed resume %s'), then verify again", id),
			"cannot verify changefeed %s: it is %s, and a %s:// changefeed's upstream is read at a point its running reader names", id, e.Status.State, schemeOf(e.Info.SourceURI))
	}
	// A held table holds the checkpoint below it: nothing after the hold
	// can be compared. A dropped one has no upstream.
	var held, notVerified []string
	for _, ti := range e.Status.Tables {
		switch ti.State {
		case model.TableHeld:
			held = append(held, ti.Line())
		case model.TableDropped:
			tables = slices.DeleteFunc(tables, func(t string) bool { return t == ti.Table })
			notVerified = append(notVerified, ti.Table+": dropped upstream, not verified")
		}
	}
	if len(held) > 0 {
		noun := "tables"
		if len(held) == 1 {
			noun = "table"
		}
		return nil, api.Errorf(api.CodeConflict, "resolve the hold first ('cdcctl changefeed get "+id+"' says how)",
			"cannot verify changefeed %s: it holds %d %s, and its checkpoint stays below the hold, so the sink cannot be compared at a point after it:\n  %s",
			id, len(held), noun, strings.Join(held, "\n  "))
	}
	if up == nil || !slices.Contains([]string{"file", "s3", "gs", "azblob", "kafka"}, u.Scheme) {
		return nil, api.Errorf(api.CodeBadRequest, "verify a changefeed that writes to a storage sink or a Kafka topic",
			"cannot verify changefeed %s: a %s:// source is compared with its upstream by rebuilding tables from a storage sink (file://, s3://, gs://, azblob://) or a Kafka topic, and this one writes to %s://",
			id, schemeOf(e.Info.SourceURI), u.Scheme)
	}
	timeout := time.Minute
	if req.WaitMs > 0 {
		timeout = time.Duration(req.WaitMs) * time.Millisecond
	}
	wait := func(ctx context.Context, ts model.Ts) (model.Ts, error) {
		return b.waitCheckpoint(ctx, e.Info.ID, ts, timeout)
	}
	rep, err := verify.Database(ctx, sinkURI, up, tables, wait)
	if err != nil {
		return nil, unreadable(id, "its sink or its upstream", err)
	}
	rep.NotVerified = append(notVerified, rep.NotVerified...)
	verify.JudgeDuplicates(&rep, sinkURI)
	return &rep, nil
}

// unreadable is a verify that could not read what it compares: the
// upstream or the sink is down or refuses the changefeed's credentials,
// which is no bug of the agent (500) but a state to fix and retry. An
// answer already chosen (a wait that ran out: 409) is kept.
func unreadable(id, what string, err error) error {
	var ae *api.Error
	if errors.As(err, &ae) {
		return err
	}
	return api.Errorf(api.CodeUnavailable, "check that "+what+" is reachable with the changefeed's own credentials, then verify again",
		"cannot verify changefeed %s: reading %s failed: %v", id, what, err)
}

// waitCheckpoint waits until a changefeed's checkpoint reaches ts, on
// this node's view of the cluster (woken by each change, not polled).
func (b backend) waitCheckpoint(ctx context.Context, cf model.ChangefeedID, ts model.Ts, timeout time.Duration) (model.Ts, error) {
	_, inc := b.n.current()
	if inc == nil {
		return 0, errNotJoined
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var at model.Ts
	err := inc.View.WaitFor(ctx, func(st *meta.State) bool {
		e, ok := st.Changefeeds[cf]
		if ok {
			at = e.Status.CheckpointTs
		}
		return ok && at >= ts
	})
	if err != nil {
		return 0, api.Errorf(api.CodeConflict, fmt.Sprintf("resume it if it is paused ('cdcctl changefeed get %s' shows its state and lag), or give it longer with --wait", cf),
			"the checkpoint of %s did not reach %s within %s (--wait), so the sink cannot be compared at that point", cf, ts.Time().Format(time.RFC3339Nano), timeout)
	}
	return at, nil
}

// schemeOf names a URI's scheme without anything else of it (a DSN may
// hold a password).
func schemeOf(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		return "unknown"
	}
	return u.Scheme
}
