package kafka_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A topic deleted under a running changefeed (and not created again by
// the broker) is a permanent error that says to create it.
func TestADeletedTopicIsPermanent(t *testing.T) {
	t.Parallel()
	c := faultyCluster(t, 3)
	uri := fmt.Sprintf("kafka://%s/cdc?retry-timeout=500ms", c.Addrs())
	s := open(t, uri)
	g := live(t, "gen://?tables=1&keys=100&rate=2000")
	r := startDispatcher(t, g, s, "p1.1", 1, model.Span{Table: "t0001"}, g.TableVersion(0))
	time.Sleep(300 * time.Millisecond)
	admin, err := sarama.NewClusterAdmin(c.ListenAddrs(), sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DeleteTopic("cdc"); err != nil {
		t.Fatal(err)
	}
	var runErr error
	select {
	case runErr = <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the dispatcher did not fail")
	}
	permanent, remedy := sink.IsPermanent(runErr)
	if !permanent || !strings.Contains(remedy, `topic "cdc" does not exist`) || !strings.Contains(remedy, "changefeed resume") {
		t.Fatalf("a deleted topic: %v (permanent %v, remedy %q)", runErr, permanent, remedy)
	}
}
