package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/embedetcd/etcdtest"
	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A node frozen past its lease wakes with messages still inside its
// producer (retried while a broker refused them); its partitions already
// run elsewhere. The producer asks the member's tenure (a real etcd lease
// here) before each attempt, and sends none of them: they would land
// after the new owner's newer rows.
func TestAProducerSendsNothingOnceItsLeaseMayHaveEnded(t *testing.T) {
	_, cli := etcdtest.Start(t)
	m, err := cluster.Join(context.Background(), meta.NewStore(cli, "test"), model.NodeInfo{ID: "capture-1", Address: "capture-1"}, 2*time.Second, meta.Previous{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Abandon()
	c := faultyCluster(t, 1) // its one partition is on the broker that fails
	uri := fmt.Sprintf("kafka://%s/cdc?retry-timeout=1m", c.Addrs())
	s, err := kafka.OpenWith(context.Background(), uri, quiet(), kafka.Env{Tenure: m.Tenure()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g, err := gen.New(gen.Config{Tables: 1, Keys: 4, Rate: 200, StartMillis: 1_800_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	r, err := g.Open(model.Span{Table: g.TableNames()[0]}, model.TsFromMillis(1_800_000_000_000))
	if err != nil {
		t.Fatal(err)
	}
	evs := sourcetest.Read(t, r, model.TsFromMillis(1_800_000_002_000), 100)

	c.Fail(kerr.NotEnoughReplicas.Code)
	acked := make(chan error, 1)
	if err := s.Write(context.Background(), &sink.Batch{Dispatcher: "t-p1.1", Epoch: 1, Events: evs, OnFlushed: func(err error) { acked <- err }}); err != nil {
		t.Fatal(err)
	}
	// The lease ends (the cluster gave up on the node) while the process
	// is stopped for longer than the TTL; then the broker takes writes
	// again and the producer retries what it held.
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(m.Info().Incarnation)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	c.Heal()
	select {
	case err := <-acked:
		if err == nil || !strings.Contains(err.Error(), "writes nothing more") {
			t.Fatalf("the batch after the lease ended: %v; want it refused by the tenure", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the batch was never acked")
	}
	if landed := countMessages(t, uri); landed != 0 {
		t.Fatalf("%d messages landed after the lease ended; want 0", landed)
	}
}
