package kafka

// This file is the sink's connections to the brokers: the partitions'
// leaders as the refresher looks them up, and the lanes, a broker's
// connections that the pump (producer.go) and the exactly-once writers
// (txn_send.go) send on.

import (
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// lane is one of a broker's connections: a broker leading several of
// the topic's partitions gets them spread over connections-per-broker
// connections, each with one request on the wire, so the next lane's
// request is encoded and sent while the broker works on the one before
// it (one connection left the encoding and the broker's work taking
// turns: 0.79 of a bare sarama producer on two cores, 1.00 with four).
// A partition's order holds because it has one batch on the wire at a
// time (partState.inflight), whichever lane carries it: the lanes are
// numbered again when the leaders are looked up, and a partition that
// changes lane does so only after its batch was answered.
type lane struct {
	broker int32
	n      int
}

// refreshSoon asks the refresher for the topic's metadata, once for any
// number of asks while one is under way.
func (s *Sink) refreshSoon() {
	select {
	case s.refresh <- struct{}{}:
	default:
	}
}

// refresher refreshes the topic's metadata and looks up every
// partition's leader when asked, off the pump and s.mu (both may wait on
// the network), and wakes the pump afterwards.
func (s *Sink) refresher() {
	defer close(s.refreshed)
	check := time.NewTicker(topicCheckEvery)
	defer check.Stop()
	seen := s.topicParts
	for {
		select {
		case <-s.refresh:
			_ = s.client.RefreshMetadata(s.cfg.Topic)
			s.lookUpLeaders()
			s.renewProducerID()
			s.wake()
		case <-check.C:
			if err := s.client.RefreshMetadata(s.cfg.Topic); err != nil {
				continue
			}
			if parts, err := s.client.Partitions(s.cfg.Topic); err == nil && int32(len(parts)) != seen {
				seen = int32(len(parts))
				s.partitionsChanged(seen)
			}
		case <-s.life.Done():
			return
		}
	}
}

// topicCheckEvery is how often the sink looks at its topic's partition
// count (sarama's own metadata refresh is every 10 minutes).
var topicCheckEvery = 30 * time.Second

// partitionsChanged tells the operator that the topic's partition count
// changed under the sink, and what it means for the changefeed's keys.
func (s *Sink) partitionsChanged(now int32) {
	if now < s.partitions {
		// Deleted and created again smaller: keys of the missing
		// partitions have nowhere to go.
		s.log.Warn(fmt.Sprintf("kafka sink: topic %q now has %d partitions, fewer than the %d this changefeed hashes its keys over; writes to the others fail until the topic has them again (kafka-topics.sh --alter --topic %s --partitions %d)",
			s.cfg.Topic, now, s.partitions, s.cfg.Topic, s.partitions), "topic", s.cfg.Topic)
		return
	}
	if s.cfg.HashPartitions != 0 {
		s.log.Info("kafka sink: the topic's partition count changed; this changefeed goes on hashing its keys over its hash-partitions, so a key stays in its partition",
			"topic", s.cfg.Topic, "partitions", now, HashPartitionsOption, s.cfg.HashPartitions)
		return
	}
	// A changefeed created before hash-partitions was pinned at create.
	s.log.Warn(fmt.Sprintf("kafka sink: topic %q now has %d partitions, %d when this sink opened; this changefeed hashes its keys over all of the topic's partitions, so once a capture opens its sink again (a restart, a move) a key's next changes go to another partition than its earlier ones, and a consumer reading both may take them out of order. To keep every key where it is: cdcctl changefeed pause, then changefeed update --sink-option %s=%d, then resume",
		s.cfg.Topic, now, s.topicParts, HashPartitionsOption, s.topicParts), "topic", s.cfg.Topic)
}

// lookUpLeaders sets every partition's leader from the client's metadata.
// Only partitions the metadata gives a leader are asked (asking for one
// without a leader refreshes the metadata again, at length).
func (s *Sink) lookUpLeaders() {
	leaders := make([]*sarama.Broker, s.partitions)
	lanes := make([]int, s.partitions)
	// Why a partition has none: the topic gone says more than a leader
	// being elected.
	noLeader := error(sarama.ErrLeaderNotAvailable)
	if writable, err := s.client.WritablePartitions(s.cfg.Topic); err != nil {
		noLeader = err
	} else {
		for _, p := range writable {
			if p < 0 || p >= s.partitions {
				continue
			}
			if b, err := s.client.Leader(s.cfg.Topic, p); err == nil {
				leaders[p] = b
			}
		}
	}
	// A broker's partitions take its lanes in turn.
	led, used := map[int32]int{}, map[lane]bool{}
	for p, b := range leaders {
		if b != nil {
			lanes[p] = led[b.ID()] % s.cfg.Connections
			led[b.ID()]++
			used[lane{b.ID(), lanes[p]}] = true
		}
	}
	s.mu.Lock()
	s.leaders, s.laneOf, s.lanesUsed, s.noLeader = leaders, lanes, used, noLeader
	s.mu.Unlock()
}

// connLocked is a lane's connection: the client's own to the broker for
// the first lane, one of the sink's for the others (opened on its first
// request, dialled again if the broker moved). s.mu is held.
func (s *Sink) connLocked(ln lane, leader *sarama.Broker) *sarama.Broker {
	if ln.n == 0 {
		return leader
	}
	return laneConn(s.conns, ln, leader) // its lane is idle: nothing of it is on the wire
}

// laneConn is lane ln's connection in conns, made for leader's address
// when there is none or the broker moved (the old one closed: Close
// waits for a request on it, as sarama holds a broker's lock through
// one). s.mu is held.
func laneConn(conns map[lane]*sarama.Broker, ln lane, leader *sarama.Broker) *sarama.Broker {
	c := conns[ln]
	if c == nil || c.Addr() != leader.Addr() {
		if c != nil {
			go c.Close()
		}
		c = sarama.NewBroker(leader.Addr())
		conns[ln] = c
	}
	return c
}

// pruneLanesLocked closes the sink's connections of lanes no partition
// is on any more (a broker that leads fewer partitions, or left): idle
// ones only. s.mu is held.
func (s *Sink) pruneLanesLocked(busy map[lane]bool) {
	for ln, c := range s.conns {
		if !busy[ln] && !s.lanesUsed[ln] {
			go c.Close()
			delete(s.conns, ln)
		}
	}
}

// closeLanes closes the pump's own connections once it is done.
func (s *Sink) closeLanes() { s.closeConns(&s.conns) }

// closeConns closes the connections of *m (the pump's or the
// exactly-once writers') and empties it.
func (s *Sink) closeConns(m *map[lane]*sarama.Broker) {
	s.mu.Lock()
	conns := *m
	*m = map[lane]*sarama.Broker{}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// txnConn is the connection to a leader that a writer of the given lane
// sends its record batches on: the client's own for lane 0, one of the
// sink's for the others. sarama's broker holds its connection from a
// request until its answer, so writers sharing one connection took
// turns, one request on the wire per broker; writers spread over
// connections-per-broker connections overlap. Closed with the sink.
func (s *Sink) txnConn(leader *sarama.Broker, n int) *sarama.Broker {
	if n == 0 {
		return leader
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// A writer that took the connection before it was replaced opens it
	// again: txnConnDone closes it.
	return laneConn(s.txnConns, lane{leader.ID(), n}, leader)
}

// txnConnDone closes the connection a writer of lane n made call c on if
// it was replaced meanwhile (its leader moved: another writer dialled the
// new one and closed this one, which c's Open then dialled again, or the
// sink closed): no one else would close it. Lane 0's is the client's own.
func (s *Sink) txnConnDone(c *produceCall, n int) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	current := s.txnConns[lane{c.id, n}] == c.broker
	s.mu.Unlock()
	if !current {
		// Not waited for: Close waits for a request another writer of the
		// lane may still have on it.
		go c.broker.Close()
	}
}
