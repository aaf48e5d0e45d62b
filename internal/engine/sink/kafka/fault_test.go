package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcctl/cdcctl/internal/engine/dispatcher"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka/kafkatest"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

func faultyCluster(t testing.TB, partitions int32) *kafkatest.Cluster {
	t.Helper()
	c, err := kafkatest.Start(3, "cdc", partitions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// supervised runs one table's dispatcher and, each time it fails, starts
// its successor (the next epoch) from its checkpoint once its Run has
// returned: what the dispatcher manager's recovery does.
type supervised struct {
	failures atomic.Int32
	errs     chan error
	stop     chan struct{}
	final    chan model.Ts
}

func supervise(t *testing.T, g *gen.Generator, s sink.Sink, table string, from model.Ts) *supervised {
	sv := &supervised{errs: make(chan error, 64), stop: make(chan struct{}), final: make(chan model.Ts, 1)}
	go func() {
		epoch := uint64(1)
		for {
			d, err := dispatcher.New(dispatcher.Config{ID: fmt.Sprintf("%s.%d", table, epoch), Epoch: epoch, Span: model.Span{Table: table},
				Start: from, Source: g, Sink: s, Now: now, BatchSize: 64, Idle: 5 * time.Millisecond})
			if err != nil {
				t.Error(err)
				return
			}
			done := make(chan error, 1)
			go func() { done <- d.Run(context.Background()) }()
			select {
			case err := <-done:
				sv.failures.Add(1)
				select {
				case sv.errs <- err:
				default:
				}
				from, epoch = d.Checkpoint(), epoch+1
			case <-sv.stop:
				final, err := d.Stop(context.Background())
				if err != nil {
					// Failed as it was asked to stop: everything up to
					// its checkpoint is there.
					final = d.Checkpoint()
				}
				sv.final <- final
				return
			}
		}
	}()
	return sv
}

// Seed 002, order kept: one broker of three refuses every produce
// request (NOT_ENOUGH_REPLICAS) for two and a half seconds while four
// dispatchers write under load. Each dispatcher with rows there fails
// after the retry timeout and its successor replays from the checkpoint;
// no row behind a failed one reached Kafka before the replay: verify
// finds nothing lost and nothing out of order. (Before the fence, rows
// behind a failed one landed when the broker came back: 89 rows out of
// order in the run that found it.)
//
// The producer's metrics name the broker: the faulty one (0) refused,
// the others answered and refused nothing; bytes and round trips are
// counted.
func TestPerKeyOrderIsKeptThroughABrokerFault(t *testing.T) {
	t.Parallel()
	m := &produced{n: map[string]int{}}
	orderThroughAFault(t, "", func(c *kafkatest.Cluster) { c.Fail(kerr.NotEnoughReplicas.Code) }, m)
	m.mu.Lock()
	defer m.mu.Unlock()
	refused0, ok12, refused12 := m.n["0 refused"], m.n["1 ok"]+m.n["2 ok"], m.n["1 refused"]+m.n["2 refused"]
	if refused0 == 0 || ok12 == 0 || refused12 != 0 || m.bytes == 0 || m.took == 0 {
		t.Fatalf("produce requests: broker 0 refused %d; brokers 1 and 2 answered %d, refused %d; %d bytes in %s: %v", refused0, ok12, refused12, m.bytes, m.took, m.n)
	}
}

// produced records what a sink's producer reports (kafka.Metrics), as
// the agent's metrics do.
type produced struct {
	mu    sync.Mutex
	n     map[string]int // "broker result"
	bytes int
	took  time.Duration
}

func (p *produced) Produce(broker int32, bytes int, took time.Duration, result string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n[fmt.Sprintf("%d %s", broker, result)]++
	p.bytes += bytes
	p.took += took
}

// The same when the broker drops its connections (a broker restarting):
// the producer resends those batches itself and, when it gives up,
// returns the connection's error; that is transient too (a recovery, not
// a failed changefeed).
func TestPerKeyOrderIsKeptThroughDroppedConnections(t *testing.T) {
	t.Parallel()
	orderThroughAFault(t, "", func(c *kafkatest.Cluster) { c.Drop() }, nil)
}

// orderThroughAFault runs four tables' dispatchers into a sink (URI
// parameters params) through a fault of one broker of three, and proves
// with verify that nothing was lost or reordered; the sink's producer
// reports to metrics, if given. It returns the sink's URI and the
// checkpoint everything up to which is in the topic.
func orderThroughAFault(t *testing.T, params string, fault func(*kafkatest.Cluster), metrics kafka.Metrics) (string, model.Ts) {
	c := faultyCluster(t, 6)
	uri := fmt.Sprintf("kafka://%s/cdc?retry-timeout=500ms%s", c.Addrs(), params)
	var s *kafka.Sink
	if metrics == nil {
		s = open(t, uri)
	} else {
		var err error
		if s, err = kafka.OpenWith(context.Background(), uri, quiet(), kafka.Env{Metrics: metrics}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
	}
	g := live(t, "gen://?tables=4&keys=40&rate=2000")
	var runs []*supervised
	for i := range 4 {
		runs = append(runs, supervise(t, g, s, fmt.Sprintf("t%04d", i+1), g.TableVersion(0)))
	}
	time.Sleep(500 * time.Millisecond)
	fault(c)
	time.Sleep(2500 * time.Millisecond)
	c.Heal()
	time.Sleep(1500 * time.Millisecond)
	upTo := model.Ts(1<<63 - 1)
	failures := int32(0)
	for _, sv := range runs {
		close(sv.stop)
		upTo = min(upTo, <-sv.final)
		failures += sv.failures.Load()
	}
	if failures == 0 {
		t.Fatal("no dispatcher failed: the fault did not happen")
	}
	for _, sv := range runs {
		for drained := false; !drained; {
			select {
			case err := <-sv.errs:
				var de *kafka.DispatcherError
				if !errors.As(err, &de) || !de.Transient {
					t.Fatalf("a dispatcher failed with %v, want a transient DispatcherError", err)
				}
			default:
				drained = true
			}
		}
	}
	rep, err := verify.Kafka(context.Background(), g, uri, upTo)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lost != 0 || rep.OutOfOrder != 0 || !rep.OK {
		t.Fatalf("after a broker fault: %+v", rep)
	}
	t.Logf("%d dispatcher failures; verified %d events: %d lost, %d out of order, %d duplicates (replays)", failures, rep.Expected, rep.Lost, rep.OutOfOrder, rep.Duplicates)
	return uri, upTo
}

// A broker that sits on the produce requests of a quarter second past the
// client's read timeout (three times dial-timeout), and appends them only
// after everything else: the sink closed those connections and sent the
// batches again, which landed, and the rows' newer changes after them.
// Unnumbered, each late request then lands last, and a consumer ends on
// an older change of its rows than their newest (verify: out of order).
// Numbered, the broker drops the late copies (idempotence.go).
func TestALateCopyOfABatchDoesNotLandAfterNewerRows(t *testing.T) {
	t.Parallel()
	c := faultyCluster(t, 6)
	var holding atomic.Bool
	var held atomic.Int32
	release := make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	t.Cleanup(letGo) // before the cluster's close (cleanups run last first)
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if holding.Load() && c.CurrentNode() == c.Faulty {
			held.Add(1)
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	uri := fmt.Sprintf("kafka://%s/cdc?dial-timeout=100ms", c.Addrs())
	s := open(t, uri)
	g := live(t, "gen://?tables=4&keys=40&rate=2000")
	var runs []*supervised
	for i := range 4 {
		runs = append(runs, supervise(t, g, s, fmt.Sprintf("t%04d", i+1), g.TableVersion(0)))
	}
	time.Sleep(500 * time.Millisecond)
	holding.Store(true)
	time.Sleep(250 * time.Millisecond)
	holding.Store(false)
	time.Sleep(2 * time.Second) // the batches sent again land, and newer rows
	upTo := model.Ts(1<<63 - 1)
	for _, sv := range runs {
		close(sv.stop)
		upTo = min(upTo, <-sv.final)
	}
	if held.Load() == 0 {
		t.Fatal("the broker sat on no request: the test proves nothing")
	}
	letGo() // every request the broker sat on is appended now
	time.Sleep(500 * time.Millisecond)
	rep, err := verify.Kafka(context.Background(), g, uri, upTo)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lost != 0 || rep.OutOfOrder != 0 || !rep.OK {
		t.Fatalf("after %d requests the broker appended late: %+v", held.Load(), rep)
	}
	t.Logf("%d requests appended late; verified %d events: %d lost, %d out of order, %d duplicates", held.Load(), rep.Expected, rep.Lost, rep.OutOfOrder, rep.Duplicates)
}

// A permanent error (a row larger than the sink allows) is classified
// so, with what to do about it.
func TestAPermanentErrorSaysWhatToDo(t *testing.T) {
	t.Parallel()
	c := broker(t, "cdc")
	uri := fmt.Sprintf("kafka://%s/cdc?max-message-bytes=1024", c.ListenAddrs()[0])
	s := open(t, uri)
	def := &source.TableDef{Schema: "shop", Name: "notes", Columns: []source.ColumnDef{{Name: "id", Type: "int8", KeyPos: 1}, {Name: "body", Type: "text"}}}
	ev := []source.Event{{Kind: source.KindDML, Op: source.OpInsert, Table: "shop.notes", Key: "1", Def: def, CommitTs: 1,
		New: []source.Value{source.Text("1"), source.Text(strings.Repeat("x", 4096))}}}
	var wg sync.WaitGroup
	wg.Add(1)
	var got error
	if err := s.Write(context.Background(), &sink.Batch{Dispatcher: "p1.1", Epoch: 1, Events: ev, OnFlushed: func(err error) { got = err; wg.Done() }}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	permanent, remedy := sink.IsPermanent(got)
	if !permanent || !strings.Contains(remedy, "max-message-bytes") || !strings.Contains(remedy, "changefeed resume") {
		t.Fatalf("a message too large: %v (permanent %v, remedy %q)", got, permanent, remedy)
	}
}

// An error code the producer does not retry by itself (NETWORK_EXCEPTION)
// makes it give up on a batch on its own, with the batches behind it in
// the partition already built: the window docs/recovery.md describes.
func TestPerKeyOrderIsKeptWhenTheProducerGivesUpByItself(t *testing.T) {
	t.Parallel()
	orderThroughAFault(t, "", func(c *kafkatest.Cluster) { c.Fail(kerr.NetworkException.Code) }, nil)
}

// Nothing of a dispatcher lands behind a row of it that failed, whatever
// the row's key: a consumer of a table without a primary key tells a
// replay by the commit position going back in a partition, and takes
// what follows for rows it has seen until the position passes its
// maximum again. So in each partition a row seen for the first time must
// never be older than a row of its table seen before it. With
// partition=table every row of a table shares one partition, keys or
// not; the fault is an error code a producer does not retry
// (NETWORK_EXCEPTION). (The per-row gate that kept keyed rows in order
// before this sink had its own producer left rows of other keys free to
// land behind a failed one: this check failed on it.)
func TestNoRowLandsBehindAFailedOneInItsPartition(t *testing.T) {
	t.Parallel()
	uri, upTo := orderThroughAFault(t, "&partition=table", func(c *kafkatest.Cluster) { c.Fail(kerr.NetworkException.Code) }, nil)
	cfg, err := kafka.ParseURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	type stream struct {
		p     int32
		table string
	}
	type row struct {
		key     string
		version uint64
	}
	newest := map[stream]model.Ts{}
	seen := map[row]bool{}
	rows, behind := 0, 0
	err = kafka.Scan(context.Background(), cfg, func(p int32, kind codec.MessageKind, r codec.Row, _ model.Ts) error {
		if kind != codec.MessageRow || r.CommitTs > upTo {
			return nil
		}
		rows++
		st, id := stream{p, r.Table}, row{r.Table + "/" + r.Key, r.Version}
		if !seen[id] && r.CommitTs < newest[st] {
			if behind++; behind <= 5 {
				t.Errorf("partition %d: %s version %d (commit %d) first arrived after a row of %s committed at %d", p, id.key, r.Version, r.CommitTs, r.Table, newest[st])
			}
		}
		seen[id] = true
		newest[st] = max(newest[st], r.CommitTs)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if behind > 0 {
		t.Fatalf("%d of %d rows first landed behind a newer row of their table", behind, rows)
	}
	t.Logf("%d rows, none first landed behind a newer row of its table", rows)
}

// A sink holding buffer-memory bytes that Kafka has not acknowledged (its
// broker refuses every write) makes Write wait instead of growing, and
// takes writes again once the broker does: everything accepted lands,
// exactly once, and the batch that waited was not half taken.
func TestAFullBufferMakesWriteWait(t *testing.T) {
	c := faultyCluster(t, 1)
	uri := fmt.Sprintf("kafka://%s/cdc?retry-timeout=1m&buffer-memory=65536", c.Addrs())
	s := open(t, uri)
	g := live(t, "gen://?tables=1&keys=1000&rate=2000")
	r, err := g.Open(model.Span{Table: g.TableNames()[0]}, g.TableVersion(0))
	if err != nil {
		t.Fatal(err)
	}
	c.Fail(kerr.NotEnoughReplicas.Code)
	var acks sync.WaitGroup
	var failed atomic.Int32
	accepted, blocked := 0, false
	for i := 0; i < 200 && !blocked; i++ {
		evs := sourcetest.Read(t, r, now(), 64)
		if len(evs) == 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		acks.Add(1)
		err := s.Write(ctx, &sink.Batch{Dispatcher: "t0001.1", Epoch: 1, Events: evs, OnFlushed: func(err error) {
			if err != nil {
				failed.Add(1)
			}
			acks.Done()
		}})
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			acks.Done() // refused whole: no ack comes
			blocked = true
		case err != nil:
			t.Fatal(err)
		default:
			accepted += len(evs)
		}
	}
	if !blocked {
		t.Fatalf("%d rows taken while the broker refused them all, and Write never waited", accepted)
	}
	if accepted*300 < 65536/2 {
		t.Fatalf("Write waited after only %d rows", accepted)
	}
	c.Heal()
	done := make(chan struct{})
	go func() { acks.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the batches taken before the wait were never acknowledged")
	}
	if failed.Load() != 0 {
		t.Fatalf("%d batches failed", failed.Load())
	}
	cfg, err := kafka.ParseURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	landed := 0
	if err := kafka.ScanMessages(context.Background(), cfg, func(int32, int64, []byte) error { landed++; return nil }); err != nil {
		t.Fatal(err)
	}
	if landed != accepted {
		t.Fatalf("%d messages in the topic, %d rows taken", landed, accepted)
	}
	t.Logf("Write waited after %d rows; all of them landed once the broker healed", accepted)
}

// A failed dispatcher stays fenced while it may still write, however
// many others have failed: the sweep that bounds the fences kept (at
// 1,024) took every closed one with nothing outstanding, and the failed
// dispatcher's next batch went out under a new, open fence, after its
// failed row (its successor's replay then put older rows after it).
func TestAFailedDispatcherStaysFencedWhenManyHaveFailed(t *testing.T) {
	t.Parallel()
	c := broker(t, "cdc")
	s := open(t, fmt.Sprintf("kafka://%s/cdc?max-message-bytes=1024", c.ListenAddrs()[0]))
	def := &source.TableDef{Schema: "shop", Name: "notes", Columns: []source.ColumnDef{{Name: "id", Type: "int8", KeyPos: 1}, {Name: "body", Type: "text"}}}
	row := func(body string) []source.Event {
		return []source.Event{{Kind: source.KindDML, Op: source.OpInsert, Table: "shop.notes", Key: "1", Def: def, CommitTs: 1,
			New: []source.Value{source.Text("1"), source.Text(body)}}}
	}
	write := func(id, body string) error {
		done := make(chan error, 1)
		if err := s.Write(context.Background(), &sink.Batch{Dispatcher: id, Epoch: 1, Events: row(body), OnFlushed: func(err error) { done <- err }}); err != nil {
			return err
		}
		return <-done
	}
	for d := range 1100 {
		if err := write(fmt.Sprintf("p%d.1", d), strings.Repeat("x", 4096)); err == nil {
			t.Fatalf("dispatcher %d: a row over max-message-bytes was written", d)
		}
	}
	if err := write("new.1", "small"); err != nil { // a new fence: the sweep
		t.Fatal(err)
	}
	if err := write("p0.1", "small"); err == nil {
		t.Fatal("a failed dispatcher's next batch was written after its failed row")
	}
}
