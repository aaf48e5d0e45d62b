package kafka

import (
	"math"
	"testing"
)

// A batch whose attempt may have landed in the producer's last epoch
// cannot be stamped again until the refresher has a new producer id: it
// waits unstamped (never with a stamp the broker could take for
// another batch's), then goes under the new id from sequence 0.
func TestABatchWhenTheEpochsRunOutWaitsForANewProducerID(t *testing.T) {
	s := &Sink{pid: 7, epoch: math.MaxInt16, refresh: make(chan struct{}, 1)}
	p := &partState{}
	r := &record{md: &meta{}}
	st, ok := s.stampLocked(p, 1)
	if !ok || st != (stamp{pid: 7, epoch: math.MaxInt16, seq: 0}) {
		t.Fatalf("stamped %+v, %v", st, ok)
	}
	// Sent, its answer never came, and the broker refused its numbers.
	p.again, p.sent, p.spent, p.restamp = []*record{r}, st, true, true
	batch, st, _, stamped := s.nextBatchLocked(p)
	if stamped || st != noStamp || len(batch) != 1 || !s.pidWanted || len(s.refresh) != 1 {
		t.Fatalf("with the epochs spent: stamped=%v %+v, %d records, a new id asked: %v", stamped, st, len(batch), s.pidWanted)
	}
	// What the pump does with it (retryLocked): kept to send again.
	p.again, p.sent, p.restamp = batch, st, true
	if batch, _, _, stamped := s.nextBatchLocked(p); stamped || len(batch) != 1 {
		t.Fatalf("before the new id: stamped=%v", stamped)
	}
	p.again, p.sent, p.restamp = batch, noStamp, true
	s.pid, s.epoch, s.pidWanted = 8, 0, false // the refresher's new id
	batch, st, _, stamped = s.nextBatchLocked(p)
	if !stamped || st != (stamp{pid: 8, epoch: 0, seq: 0}) || len(batch) != 1 {
		t.Fatalf("under the new id: stamped=%v %+v", stamped, st)
	}
	if st, _ := s.stampLocked(p, 3); st != (stamp{pid: 8, epoch: 0, seq: 1}) {
		t.Fatalf("the next batch: %+v", st)
	}
}
