package kafka

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// A transactional writer's connection to a leader that another writer
// replaced while this one used it (the leader moved to another address)
// is closed once the writer is done with it: its call dialled it again,
// and nothing else would close it. Before, every such move left a
// connection open until the agent stopped.
func TestAWritersConnectionReplacedWhileInUseIsClosedAfterItsCall(t *testing.T) {
	var open atomic.Int64
	listen := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				open.Add(1)
				go func() {
					_, _ = io.Copy(io.Discard, c) // until the client closes it
					c.Close()
					open.Add(-1)
				}()
			}
		}()
		return l.Addr().String()
	}
	oldAddr, newAddr := listen(), listen()
	s := &Sink{sc: sarama.NewConfig(), txnConns: map[lane]*sarama.Broker{}}
	s.sc.Net.DialTimeout = 2 * time.Second
	s.sc.ApiVersionsRequest = false // the listener speaks no Kafka: a connection is all it takes

	c := &produceCall{broker: s.txnConn(sarama.NewBroker(oldAddr), 1), id: -1} // writer A takes lane 1's connection
	_ = c.broker.Open(s.sc)
	waitFor(t, func() bool { return open.Load() == 1 }, "A's connection open")
	if s.txnConn(sarama.NewBroker(newAddr), 1) == c.broker { // writer B: the leader moved
		t.Fatal("the lane's connection was not replaced for the leader's new address")
	}
	waitFor(t, func() bool { return open.Load() == 0 }, "the replaced connection closed by B")
	// sarama closes the socket before its Close returns: Connected waits
	// for the broker's lock, that is for the Close to end.
	if ok, _ := c.broker.Connected(); ok {
		t.Fatal("the replaced connection still open after B closed it")
	}
	_ = c.broker.Open(s.sc) // A's next call on it dials it again (produce)
	if ok, err := c.broker.Connected(); !ok {
		t.Fatalf("A's call did not reach the old address: %v", err)
	}
	waitFor(t, func() bool { return open.Load() == 1 }, "A's call connected")
	s.txnConnDone(c, 1)
	waitFor(t, func() bool { return open.Load() == 0 }, "the connection A dialled again closed after its call")
	_ = s.txnConns[lane{-1, 1}].Open(s.sc) // the lane's current one, B's, stays
	waitFor(t, func() bool { return open.Load() == 1 }, "the lane's current connection open")
	s.closeConns(&s.txnConns)
	waitFor(t, func() bool { return open.Load() == 0 }, "every connection closed with the sink")
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
