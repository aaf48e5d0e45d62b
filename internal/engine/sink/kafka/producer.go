package kafka

import (
	"errors"
	"time"

	"github.com/IBM/sarama"
)

// This file is the sink's producer: it sends the records of each Kafka
// partition in order, through sarama's client and broker connections,
// with one batch of a partition on the wire at a time.
//
// Why not sarama's AsyncProducer: it gives up on a batch by itself (an
// error code it does not retry, NETWORK_EXCEPTION say, or a leader it
// cannot find), and by then the batches behind it in the partition are
// built and may be on the wire. A newer change of a row then lands while
// the older one failed, and the replay from the checkpoint writes the
// older one after it: out of order. Keeping order on top of it took a gate
// that held a row's next change until the previous one settled: a round
// trip per change of a hot key, 0.60-0.84 of a bare producer's throughput,
// and nothing for tables without a primary key.
//
// Here the sink decides every failure itself. A batch that fails is
// retried, before anything behind it in its partition, until retry-timeout;
// a batch that fails for good (a permanent error, the retry timeout, the
// node's tenure ending) fences its dispatchers before the partition's next
// batch is built, and a fenced dispatcher's records are taken out of every
// batch built afterwards. So nothing of a dispatcher lands behind its
// failed record in any partition, whatever the table's key, and its
// successor replays from the checkpoint (duplicates, never disorder).

// record is one message waiting for, or on, the wire.
type record struct {
	rec  sarama.Record // key and value; deltas are set per attempt
	md   *meta
	part int32
	ts   time.Time // when it was handed over (the record's timestamp)
}

// recordOverhead is what a record adds to its key and value on the wire
// at most (sarama's bound, used for the batch limits as sarama does).
const recordOverhead = 5*5 + 10 + 1

// recordBatchOverhead is a record batch's header.
const recordBatchOverhead = 61

// maxRequestBytes bounds one produce request: a request takes another
// partition's batch only while a whole batch (max-message-bytes, at most
// 64 MiB) still fits below it. sarama refuses to encode a request over
// 100 MiB, and so does a broker's default socket.request.max.bytes.
const maxRequestBytes = 96 << 20

func (r *record) size() int { return len(r.rec.Key) + len(r.rec.Value) + recordOverhead }

// partState is one Kafka partition's queue. s.mu guards it.
type partState struct {
	queue    []*record // waiting, oldest first
	inflight []*record // the batch on the wire
	// again is a batch to send again after a failed attempt, as it was
	// sent (sent); restamp: stamped anew first (the broker refused its
	// stamp).
	again   []*record
	sent    stamp // of inflight, or of again
	restamp bool
	// spent: that batch's numbers are not to be given to another batch
	// (idempotence.go): an attempt of it may have been appended, or may
	// still be, or the broker's sequence is not ours.
	spent bool
	// The partition's sequence (idempotence.go): the producer id and
	// epoch it counts in, and the next batch's first number.
	seqPID   int64
	seqEpoch int16
	next     int32
	retryAt  time.Time // no attempt before (back-off after a failure)
	attempt  int
	// failingSince is the first failed attempt since the last success
	// (zero: healthy). Once it is retry-timeout old, a batch fails at its
	// first failed attempt: a dead partition's backlog drains at one
	// attempt per batch, and a short blip is ridden out however long the
	// backlog.
	failingSince time.Time
	lastErr      error // of the last failed attempt on the wire
	listed       bool  // in s.ready
}

// produceCall is one produce request on one lane and its outcome.
type produceCall struct {
	broker *sarama.Broker // the lane's connection
	id     int32
	lane   lane
	parts  []int32
	req    *sarama.ProduceRequest
	res    *sarama.ProduceResponse
	err    error
	fatal  bool // err is not worth a retry (the node's tenure ended)
	bytes  int  // of its batches
}

// listLocked queues a partition for the next round. s.mu is held.
func (s *Sink) listLocked(pid int32) {
	if p := &s.parts[pid]; !p.listed {
		p.listed = true
		s.ready = append(s.ready, pid)
	}
}

// pump builds a request per idle lane from the listed partitions,
// hands it to that lane's sender, and settles the outcomes. It is the
// only goroutine that moves records between a queue and the wire. It
// ends once Close has failed what waited and every call is back.
func (s *Sink) pump() {
	defer close(s.pumped)
	senders := map[lane]chan *produceCall{}
	busy := map[lane]bool{}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		s.mu.Lock()
		calls, dropped, next := s.buildLocked(time.Now(), busy)
		closed := s.closed
		s.mu.Unlock()
		for _, d := range dropped {
			s.finish(d.recs, d.err)
		}
		for _, c := range calls {
			busy[c.lane] = true
			ch := senders[c.lane]
			if ch == nil {
				ch = make(chan *produceCall, 1)
				senders[c.lane] = ch
				go s.send(ch)
			}
			ch <- c // never blocks: one call per lane at a time
		}
		if closed && len(busy) == 0 {
			for _, ch := range senders {
				close(ch)
			}
			s.closeLanes()
			return
		}
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
		select {
		case <-s.kick:
		case c := <-s.results:
			delete(busy, c.lane)
			s.handle(c)
		case <-timer.C:
		}
	}
}

// dropped are records settled without a send, with their error.
type dropped struct {
	recs []*record
	err  error
}

// buildLocked takes, for every lane without a request on the wire, one
// batch of each listed partition of the lane. Partitions that cannot go
// yet (backing off, their lane busy) stay listed; next is the earliest
// back-off's end. After Close, what waits is dropped. s.mu is held.
func (s *Sink) buildLocked(now time.Time, busy map[lane]bool) (calls []*produceCall, drop []dropped, next time.Time) {
	if s.closed {
		for pid := range s.parts {
			p := &s.parts[pid]
			if len(p.queue) > 0 {
				drop = append(drop, dropped{recs: p.queue, err: errSinkClosed})
				p.queue = nil
			}
			if len(p.again) > 0 {
				drop = append(drop, dropped{recs: p.again, err: errSinkClosed})
				p.again = nil
			}
			p.listed = false
		}
		s.ready = s.ready[:0]
		return nil, drop, time.Time{}
	}
	s.pruneLanesLocked(busy)
	byLane := map[lane]*produceCall{}
	keep := s.ready[:0]
	for _, pid := range s.ready {
		p := &s.parts[pid]
		if (len(p.queue) == 0 && p.again == nil) || p.inflight != nil {
			p.listed = false
			continue
		}
		if now.Before(p.retryAt) {
			next = earliest(next, p.retryAt)
			keep = append(keep, pid)
			continue
		}
		leader := s.leaders[pid]
		var c *produceCall
		var ln lane
		if leader != nil {
			ln = lane{leader.ID(), s.laneOf[pid]}
			c = byLane[ln]
			if busy[ln] || (c != nil && c.bytes+s.cfg.MaxMessageBytes > maxRequestBytes) {
				keep = append(keep, pid) // next round
				continue
			}
		}
		batch, st, fenced, stamped := s.nextBatchLocked(p)
		if len(fenced) > 0 {
			drop = append(drop, dropped{recs: fenced, err: errFenced})
		}
		if leader == nil || !stamped {
			// An attempt that failed before the wire: the refresher
			// looks the leader up, or gets a new producer id (off the
			// pump and s.mu: both wait on the network), and a partition
			// that stays without fails after retry-timeout like any
			// other.
			why := error(errNoProducerID)
			if stamped {
				why = s.noLeader
				if p.lastErr != nil {
					why = p.lastErr // what made the leader unknown says more
				}
			}
			if f := s.retryLocked(p, batch, st, now, why); f != nil {
				// Fenced now, not when the pump settles them: partitions
				// later in this round must not take their dispatchers'
				// records.
				s.shutLocked(f.recs, f.err)
				drop = append(drop, *f)
			} else if !stamped {
				p.restamp = true
			}
			if len(p.queue) == 0 && p.again == nil {
				p.listed = false
				continue
			}
			next = earliest(next, p.retryAt)
			keep = append(keep, pid)
			continue
		}
		if c == nil {
			c = &produceCall{broker: s.connLocked(ln, leader), id: ln.broker, lane: ln, req: s.newRequest()}
			byLane[ln] = c
		}
		p.listed = false
		if len(batch) == 0 {
			continue
		}
		p.inflight, p.sent = batch, st
		c.parts = append(c.parts, pid)
		c.req.AddBatch(s.cfg.Topic, pid, recordBatch(batch, st))
		c.bytes += batchBytes(batch)
	}
	s.ready = keep
	for _, c := range byLane {
		if len(c.parts) > 0 {
			calls = append(calls, c)
		}
	}
	return calls, drop, next
}

// takeLocked takes a partition's next batch: its oldest records up to
// max-message-bytes (at least one), leaving out those of fenced
// dispatchers. s.mu is held.
func (s *Sink) takeLocked(p *partState) (batch, fenced []*record) {
	bytes, n := recordBatchOverhead, 0
	for n < len(p.queue) {
		r := p.queue[n]
		if f := r.md.fence; f != nil && f.closed.Load() {
			fenced = append(fenced, r)
			n++
			continue
		}
		if len(batch) > 0 && bytes+r.size() >= s.cfg.MaxMessageBytes {
			break
		}
		bytes += r.size()
		batch = append(batch, r)
		n++
	}
	clear(p.queue[:n])
	p.queue = p.queue[n:]
	return batch, fenced
}

// recordBatch is the wire form of a partition's batch stamped st.
func recordBatch(batch []*record, st stamp) *sarama.RecordBatch {
	first, last := batch[0].ts, batch[0].ts
	for _, r := range batch {
		if r.ts.Before(first) {
			first = r.ts
		}
		if r.ts.After(last) {
			last = r.ts
		}
	}
	first = first.Truncate(time.Millisecond)
	recs := make([]*sarama.Record, len(batch))
	for i, r := range batch {
		r.rec.OffsetDelta = int64(i)
		r.rec.TimestampDelta = r.ts.Sub(first)
		recs[i] = &r.rec
	}
	return &sarama.RecordBatch{Version: 2, ProducerID: st.pid, ProducerEpoch: st.epoch, FirstSequence: st.seq, FirstTimestamp: first, MaxTimestamp: last,
		LastOffsetDelta: int32(len(batch) - 1), Records: recs}
}

func batchBytes(batch []*record) int {
	n := recordBatchOverhead
	for _, r := range batch {
		n += r.size()
	}
	return n
}

// newRequest is a produce request as sarama's producer makes it for the
// configured protocol version.
func (s *Sink) newRequest() *sarama.ProduceRequest {
	// The broker answers within the request's timeout; the connection's
	// read timeout must not give up first (an unknown outcome is a
	// duplicate on retry).
	timeout := max(min(s.sc.Producer.Timeout, s.sc.Net.ReadTimeout/2), time.Millisecond)
	req := &sarama.ProduceRequest{RequiredAcks: sarama.WaitForAll, Timeout: int32(timeout / time.Millisecond), Version: 3}
	for _, v := range []struct {
		at  sarama.KafkaVersion
		req int16
	}{{sarama.V1_0_0_0, 5}, {sarama.V2_0_0_0, 6}, {sarama.V2_1_0_0, 7}, {sarama.V2_4_0_0, 8}, {sarama.V2_8_0_0, 9}} {
		if s.sc.Version.IsAtLeast(v.at) {
			req.Version = v.req
		}
	}
	return req
}

// send runs one lane's produce calls, one at a time. A broken
// connection is closed, so the next call dials again (as sarama's
// producer does).
func (s *Sink) send(calls chan *produceCall) {
	for c := range calls {
		if t := s.tenure; t != nil && !t.Valid() {
			// Waits at most until the lease's end, and only while a
			// renewal is late.
			if err := t.Hold(s.life); err != nil {
				c.err, c.fatal = err, true
				s.results <- c
				continue
			}
		}
		s.produce(c)
		s.results <- c
	}
}

// produce makes one produce call and counts it. A connection closed
// after an error dials again (Open is a no-op on an open one).
func (s *Sink) produce(c *produceCall) {
	_ = c.broker.Open(s.sc)
	began := time.Now()
	c.res, c.err = c.broker.Produce(c.req)
	s.metrics.Produce(c.id, c.bytes, time.Since(began), s.produceResult(c))
	if c.err != nil {
		_ = c.broker.Close()
	}
}

// handle settles a call: acked batches, batches to retry (back at the
// head of their queue), and failed ones, whose dispatchers are fenced
// before the pump builds anything more.
func (s *Sink) handle(c *produceCall) {
	now := time.Now()
	var ok []*record
	var fail []dropped
	s.mu.Lock()
	for _, pid := range c.parts {
		p := &s.parts[pid]
		batch, st := p.inflight, p.sent
		p.inflight = nil
		err := c.err
		if err == nil {
			if block := c.res.GetBlock(s.cfg.Topic, pid); block == nil {
				err = sarama.ErrIncompleteResponse
			} else if block.Err != sarama.ErrNoError && block.Err != sarama.ErrDuplicateSequenceNumber {
				err = block.Err
			}
		}
		refused := err != nil && sequenceRefused(err)
		retry := err != nil && !c.fatal && (retryable(err) || refused)
		if retry && s.closed {
			retry, err = false, errSinkClosed
		}
		if err != nil && !c.fatal && (refused || !surelyNotAppended(c.err, err)) {
			p.spent = true
		}
		switch {
		case err == nil:
			ok = append(ok, batch...)
			p.spent = false
			p.attempt, p.retryAt, p.failingSince, p.lastErr = 0, time.Time{}, time.Time{}, nil
		case !retry:
			fail = append(fail, dropped{recs: batch, err: err})
			p.attempt, p.retryAt = 0, time.Time{}
			s.dropStampLocked(p, st)
		default:
			// The leader may have moved: look it up again after a
			// metadata refresh (retryLocked asks for one).
			if errors.Is(err, sarama.ErrNotLeaderForPartition) || errors.Is(err, sarama.ErrLeaderNotAvailable) || errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
				s.leaders[pid] = nil
			}
			p.lastErr = err
			if f := s.retryLocked(p, batch, st, now, err); f != nil {
				fail = append(fail, *f)
			} else if refused {
				p.restamp = true
			}
		}
		if len(p.queue) > 0 || p.again != nil {
			s.listLocked(pid)
		}
	}
	s.mu.Unlock()
	s.finish(ok, nil)
	for _, f := range fail {
		s.finish(f.recs, f.err)
	}
}

// retryLocked keeps a batch stamped st whose attempt failed with err to
// go again, as it went, after a back-off, before the rest of its
// partition's queue, and asks for the topic's metadata (the leader may
// have moved). Once the partition has been failing for longer than
// retry-timeout the batch is returned instead, to fail, and its stamp
// dropped. s.mu is held.
func (s *Sink) retryLocked(p *partState, batch []*record, st stamp, now time.Time, err error) *dropped {
	s.refreshSoon()
	if p.failingSince.IsZero() {
		p.failingSince = now
	}
	if after := now.Sub(p.failingSince); after > s.cfg.RetryTimeout && len(batch) > 0 {
		// The next batch goes at once, to fail as fast unless the
		// partition is back.
		p.attempt, p.retryAt = 0, time.Time{}
		s.dropStampLocked(p, st)
		return &dropped{recs: batch, err: errRetriedTooLong{after: after, last: err}}
	}
	p.retryAt = now.Add(backoff(p.attempt))
	p.attempt++
	p.again, p.sent = batch, st
	return nil
}

// shutLocked fences the dispatchers of records about to fail, logging
// each dispatcher's first failure as finish would. s.mu is held.
func (s *Sink) shutLocked(recs []*record, err error) {
	for _, r := range recs {
		if md := r.md; md.fence != nil && md.fence.shut(err) {
			s.failures.failed(md.dispatcher, md.epoch, IsTransient(err), err)
		}
	}
}

// earliest is the earlier of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if b.IsZero() {
		return a
	}
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// retryable says whether a delivery error is worth another attempt: the
// transient ones, and a topic or partition not known yet (metadata
// catching up; after retry-timeout it fails as permanent, with its hint).
func retryable(err error) bool {
	return IsTransient(err) || errors.Is(err, sarama.ErrUnknownTopicOrPartition)
}

// backoff is the wait before a partition's next attempt.
func backoff(attempt int) time.Duration {
	return min(50*time.Millisecond<<min(attempt, 5), time.Second)
}

// wake makes the pump look at the listed partitions.
func (s *Sink) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}
