package kafka

import (
	"github.com/IBM/sarama"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// This file keeps per-key order through the failures the producer decides
// on by itself (fence.go covers the ones the sink decides on).
//
// When the producer gives up on a batch by itself (an error code it does
// not retry, NETWORK_EXCEPTION say, or a leader it cannot find), the
// batches behind it in the partition are already built and may already be
// on the wire: the sink learns of the failure only after they went out.
// A newer version of a row would then be in the topic while an older one
// is missing, and the replay from the checkpoint writes the older one
// after it: out of order. An idempotent producer does not prevent it
// either: the producer starts a new epoch after such a failure, and
// whatever it numbers in the new epoch is accepted (measured: 24 and 210
// rows out of order in two runs).
//
// So the sink never has two messages of one row in the producer at once:
// a row's next change waits in the sink until the previous one has
// settled, then goes (sendReady); if that one failed, the dispatcher is
// fenced by then, and the next change is refused. The batch goes on with
// its other rows meanwhile. Rows of other keys are not held: only the order
// of one key's versions is what a consumer (and verify) can tell apart,
// and the replay rewrites the others as duplicates. The cost is one round
// trip per change of a key that changes again while its previous change
// is still in flight (BenchmarkKafkaSink measures it against the bare
// producer).

// rowKeys are the rows an event changes, as the gate knows them: a hash
// of its table and key columns, in the image before and after (an update
// may change the key). Hashes keep the gate's bookkeeping free of
// allocations (it runs for every message); two rows whose hashes collide
// only wait for each other, which costs a round trip and never order.
type rowKeys struct {
	n int8 // 0: not held back (a table without a primary key)
	h [2]uint64
}

func (k rowKeys) all() []uint64 { return k.h[:k.n] }

// fnv-64a, inline: hash/fnv would allocate per message.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func hashString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func hashByte(h uint64, b byte) uint64 { return (h ^ uint64(b)) * fnvPrime }

// orderKeys are an event's rows for the gate. A table without a primary
// key is not held back: a consumer of such a table tells a replay from
// new changes by commit position going back in a partition
// (docs/postgres.md), and a held-back change would go back too
// (TestPostgresIntoKafka counted a row lost or doubled when they were
// held by their content). Their changes keep the fence's order only
// (docs/recovery.md, "A known window").
func orderKeys(e *source.Event) rowKeys {
	if e.Def == nil {
		return rowKeys{n: 1, h: [2]uint64{hashString(hashByte(hashString(fnvOffset, e.Table), 0), e.Key)}}
	}
	idx := keyColumns(e.Def)
	if idx == nil {
		return rowKeys{}
	}
	var keys rowKeys
	for _, row := range [][]source.Value{e.Old, e.New} {
		if row == nil {
			continue
		}
		h := hashString(fnvOffset, e.Table)
		for _, i := range idx {
			h = hashByte(h, 0)
			if i < len(row) {
				v := row[i]
				switch {
				case v.Null:
					h = hashString(hashByte(h, 1), "null")
				case v.Unchanged:
					h = hashString(hashByte(h, 1), "unchanged")
				default:
					h = hashString(h, v.Text)
				}
			}
		}
		if keys.n == 0 || keys.h[0] != h {
			keys.h[keys.n] = h
			keys.n++
		}
	}
	if keys.n == 0 {
		return rowKeys{n: 1, h: [2]uint64{hashString(hashByte(hashString(fnvOffset, e.Table), 0), e.Key)}}
	}
	return keys
}

// keyColumns are the positions of a table's key columns (none without a
// primary key).
func keyColumns(d *source.TableDef) []int {
	var idx []int
	for _, n := range d.KeyNames() {
		idx = append(idx, d.Index(n))
	}
	return idx
}

// keyQueue is the messages waiting behind a row's message in the
// producer. A row in flight with none waiting has a nil queue in
// inFlight: a queue is made only when one is needed.
type keyQueue struct{ waiting []*sarama.ProducerMessage }

// claimKeys registers a message's rows; it returns true when none had an
// earlier message outstanding, so the message may go now. Otherwise it
// waits in each busy row's queue and goes when the last of them passes
// it on (passKeys). A message claims all its rows at once, behind
// earlier messages only, so waits never form a cycle. s.mu is held.
func (s *Sink) claimKeys(m *sarama.ProducerMessage) bool {
	md := m.Metadata.(*meta)
	for _, k := range md.keys.all() {
		q, busy := s.inFlight[k]
		if !busy {
			s.inFlight[k] = nil
			continue
		}
		if q == nil {
			q = &keyQueue{}
			s.inFlight[k] = q
		}
		q.waiting = append(q.waiting, m)
		md.pending++
	}
	return md.pending == 0
}

// passKeys hands a settled message's rows to the next message of each,
// and queues those that now hold all their rows for the sender. Called
// after a failure has fenced the dispatcher, so they see the fence. s.mu
// is held.
func (s *Sink) passKeys(md *meta) {
	for _, k := range md.keys.all() {
		q, busy := s.inFlight[k]
		if !busy {
			continue
		}
		if q == nil || len(q.waiting) == 0 {
			delete(s.inFlight, k)
			continue
		}
		next := q.waiting[0]
		q.waiting[0] = nil
		q.waiting = q.waiting[1:]
		nm := next.Metadata.(*meta)
		if nm.pending--; nm.pending == 0 {
			s.ready = append(s.ready, next)
			s.wake()
		}
	}
}

// sendReady hands the producer the messages whose earlier messages of
// the same rows have settled; a message of a fenced dispatcher, or one
// freed after Close, is refused instead. It ends once Close has drained
// the producer and nothing is left.
func (s *Sink) sendReady() {
	defer close(s.sent)
	for {
		<-s.kick
		// Close takes sendMu before it stops the producer: nothing is
		// handed to a producer being stopped.
		s.sendMu.RLock()
		s.mu.Lock()
		batch, closed, drained := s.ready, s.closed, s.drained
		s.ready = nil
		s.mu.Unlock()
		var refused []*sarama.ProducerMessage
		for _, m := range batch {
			if closed || m.Metadata.(*meta).fence.closed.Load() {
				refused = append(refused, m)
			} else {
				s.producer.Input() <- m
			}
		}
		s.sendMu.RUnlock()
		for _, m := range refused {
			err := errFenced
			if closed {
				err = errSinkClosed
			}
			s.settle(m, err)
		}
		if drained {
			s.mu.Lock()
			left := len(s.ready)
			s.mu.Unlock()
			if left == 0 {
				return
			}
			s.wake()
		}
	}
}

// wake makes sendReady look at the ready messages.
func (s *Sink) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}
