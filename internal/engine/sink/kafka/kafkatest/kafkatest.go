// Package kafkatest runs a real-protocol Kafka cluster in process
// (kfake) whose one broker can be made to fail, for the tests of the
// Kafka sink and of dispatcher recovery (seed 002), and for runbooks.
package kafkatest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Cluster is kfake brokers on loopback; Faulty is the broker that fails
// on demand (node 0, the leader of the topic's partitions 0, n, 2n … for
// n brokers).
type Cluster struct {
	*kfake.Cluster
	Topic      string
	Partitions int32
	Faulty     int32
	code       atomic.Int32 // 0: healthy

	mu      sync.Mutex
	stalled chan struct{} // non-nil: produce requests wait until it closes
}

// Start starts brokers with topic seeded with partitions.
func Start(brokers int, topic string, partitions int32) (*Cluster, error) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(brokers), kfake.SeedTopics(partitions, topic))
	if err != nil {
		return nil, err
	}
	// Leaders spread round robin (kfake may put them anywhere), so the
	// faulty broker (node 0) leads partitions 0, n, 2n …, the same in
	// every run.
	for p := int32(0); p < partitions; p++ {
		if err := kc.MoveTopicPartition(topic, p, p%int32(brokers)); err != nil {
			kc.Close()
			return nil, fmt.Errorf("spread the leaders of %s: %w", topic, err)
		}
	}
	c := &Cluster{Cluster: kc, Topic: topic, Partitions: partitions, Faulty: 0}
	kc.ControlKey(int16(kmsg.Produce), c.produce)
	return c, nil
}

// produce answers a produce request to the faulty broker with the fault's
// error code for every partition, while there is a fault.
func (c *Cluster) produce(kreq kmsg.Request) (kmsg.Response, error, bool) {
	c.KeepControl()
	c.mu.Lock()
	stalled := c.stalled
	c.mu.Unlock()
	if stalled != nil && c.CurrentNode() == c.Faulty {
		// Held, the broker answering other requests meanwhile, then
		// handled as usual.
		c.SleepControl(func() { <-stalled })
		return nil, nil, false
	}
	code := int16(c.code.Load())
	if code == 0 || c.CurrentNode() != c.Faulty {
		return nil, nil, false
	}
	if code == dropCode {
		// A broker restarting: the connection closes unanswered.
		return nil, errors.New("kafkatest: connection dropped"), true
	}
	return Refusal(kreq, code), nil, true
}

// Refusal is the answer to a produce request that refuses every
// partition in it with code (a Kafka error code): nothing appended.
func Refusal(kreq kmsg.Request, code int16) kmsg.Response {
	req := kreq.(*kmsg.ProduceRequest)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// Fail makes the faulty broker answer every produce request with code
// (a Kafka error code, kerr.NotEnoughReplicas.Code say) until Heal.
func (c *Cluster) Fail(code int16) { c.code.Store(int32(code)) }

// dropCode stands for Drop among the error codes (none is negative
// but -1, UNKNOWN_SERVER_ERROR, which Fail never needs).
const dropCode = -1

// Drop makes the faulty broker close the connection of every produce
// request, unanswered, until Heal: a broker restarting.
func (c *Cluster) Drop() { c.code.Store(dropCode) }

// Stall makes the faulty broker hold every produce request, unanswered,
// until Heal: a broker or a network that has slowed to a crawl.
func (c *Cluster) Stall() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stalled == nil {
		c.stalled = make(chan struct{})
	}
}

// Heal ends the fault; stalled requests are answered.
func (c *Cluster) Heal() {
	c.code.Store(0)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stalled != nil {
		close(c.stalled)
		c.stalled = nil
	}
}

// Addrs is the brokers' addresses, comma-separated, as a sink URI names
// them.
func (c *Cluster) Addrs() string { return strings.Join(c.ListenAddrs(), ",") }

// FaultyPartitions are the topic's partitions the faulty broker leads.
func (c *Cluster) FaultyPartitions() map[int32]bool {
	out := map[int32]bool{}
	for p := int32(0); p < c.Partitions; p++ {
		if c.LeaderFor(c.Topic, p) == c.Faulty {
			out[p] = true
		}
	}
	return out
}

// String describes the cluster for logs.
func (c *Cluster) String() string {
	return fmt.Sprintf("kfake %s (topic %s, %d partitions, broker %d fails on demand)", c.Addrs(), c.Topic, c.Partitions, c.Faulty)
}
