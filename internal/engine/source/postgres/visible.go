package postgres

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Commit order is not visibility order. PostgreSQL writes a transaction's
// commit record, waits for it to be flushed, and only then takes the
// transaction out of the set of running ones, which is what a snapshot
// looks at. So a transaction T may come before a chunk's low watermark in
// the WAL (and in the stream: the chunk does not drop T's keys) and yet
// be invisible to the chunk's read, taken just after the watermark
// committed, if T's backend has not finished committing by then: the
// watermark's backend flushed both records, returned first, and the read
// began. The chunk would then return T's rows as they were before T, at
// its high watermark, over T's change (a lost update, or a deleted row
// back). A loaded machine makes it likely enough to be seen.
//
// The chunk's read therefore runs in a REPEATABLE READ transaction that
// also asks for its snapshot (txid_current_snapshot: who was running,
// xip, and the first xid not yet assigned, xmax); the high watermark
// carries it. The puller, which sees every transaction's xid in commit
// order, remembers where each low watermark passed and the xids of the
// last transactions with rows; at the high watermark it lists the
// positions of those before the low watermark that the snapshot did not
// see (Racy). The partition drops the keys its span had at those
// positions from the chunk, as it drops the keys changed inside the
// window: the stream carries those rows, newer than the chunk's.

// snapshotOf is a snapshot as txid_current_snapshot gives it.
type snapshotOf struct {
	xmin, xmax uint64
	xip        map[uint32]bool
}

// parseSnapshot reads "xmin:xmax:xip,xip,...".
func parseSnapshot(s string) (snapshotOf, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return snapshotOf{}, fmt.Errorf("snapshot %q: want xmin:xmax:xip", s)
	}
	var snap snapshotOf
	var err error
	if snap.xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return snapshotOf{}, fmt.Errorf("snapshot %q: %w", s, err)
	}
	if snap.xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return snapshotOf{}, fmt.Errorf("snapshot %q: %w", s, err)
	}
	snap.xip = map[uint32]bool{}
	if parts[2] != "" {
		for _, x := range strings.Split(parts[2], ",") {
			v, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return snapshotOf{}, fmt.Errorf("snapshot %q: %w", s, err)
			}
			snap.xip[uint32(v)] = true
		}
	}
	return snap, nil
}

// hides says a committed transaction (its 32-bit xid, as the stream gives
// it) is not visible to the snapshot: it was running when the snapshot
// was taken, or began after. Transaction ids wrap around: xids within
// 2^31 of xmax compare by their difference.
func (s snapshotOf) hides(xid uint32) bool {
	return s.xip[xid] || int32(xid-uint32(s.xmax)) >= 0
}

// commitOrder is the puller's memory for the check: where the low
// watermarks in flight passed, and the xids of the last transactions with
// rows, in commit order. The pull loop alone uses it.
type commitOrder struct {
	lowAt map[string]model.Ts // by chunk id
	ring  []committed
	next  int  // where the next one goes
	full  bool // the ring has wrapped: older ones are forgotten
}

type committed struct {
	xid uint32
	ts  model.Ts
}

// orderDepth is how many transactions with rows the puller remembers: a
// transaction the low watermark's read missed committed just before it,
// far fewer transactions back than this. lowsHeld bounds the low
// watermarks remembered whose high one never came (its reader stopped).
const (
	orderDepth = 16384
	lowsHeld   = 8192
)

func newCommitOrder() *commitOrder {
	return &commitOrder{lowAt: map[string]model.Ts{}, ring: make([]committed, orderDepth)}
}

// pass notes a transaction and returns its watermarks, a high one
// judged: the positions of earlier transactions its read did not see,
// or unsure when the puller cannot tell (it restarted after the low
// watermark, or forgot that far back). missed counts those positions.
func (o *commitOrder) pass(tx *Txn) (marks [][]byte, missed int) {
	marks = tx.Marks
	for i, m := range marks {
		var mk source.Mark
		if json.Unmarshal(m, &mk) != nil {
			continue
		}
		switch mk.Kind {
		case "low":
			if len(o.lowAt) >= lowsHeld {
				o.forgetOldLows()
			}
			o.lowAt[mk.ID] = tx.Ts
		case "high":
			low, ok := o.lowAt[mk.ID]
			delete(o.lowAt, mk.ID)
			if mk.Snap == "" {
				continue // read under a lock that waited for the writers (a table without a key)
			}
			snap, err := parseSnapshot(mk.Snap)
			if !ok || err != nil {
				mk.Unsure = true
			} else {
				mk.Racy, mk.Unsure = o.unseen(snap, low)
				missed += len(mk.Racy)
			}
			if b, err := json.Marshal(mk); err == nil {
				marks[i] = b
			}
		}
	}
	if tx.Parted || hasRows(tx) {
		o.ring[o.next] = committed{xid: tx.Xid, ts: tx.Ts}
		o.next++
		if o.next == len(o.ring) {
			o.next, o.full = 0, true
		}
	}
	return marks, missed
}

// unseen lists the positions of transactions before low that the
// snapshot hides; unsure when every transaction remembered is after low
// and older ones were forgotten.
func (o *commitOrder) unseen(snap snapshotOf, low model.Ts) ([]model.Ts, bool) {
	var racy []model.Ts
	n := o.next
	if o.full {
		n = len(o.ring)
	}
	reached := false // a remembered transaction at or before low
	for k := 1; k <= n; k++ {
		c := o.ring[(o.next-k+len(o.ring))%len(o.ring)]
		if c.ts >= low {
			continue
		}
		reached = true
		if snap.hides(c.xid) {
			racy = append(racy, c.ts)
		}
	}
	return racy, o.full && !reached
}

func hasRows(tx *Txn) bool {
	for i := range tx.Events {
		if tx.Events[i].Kind == source.KindDML {
			return true
		}
	}
	return false
}

// forgetOldLows drops the low watermarks older than the midpoint of
// those remembered: about half, those whose readers stopped long ago.
func (o *commitOrder) forgetOldLows() {
	var lo, hi model.Ts
	first := true
	for _, t := range o.lowAt {
		if first {
			lo, hi, first = t, t, false
		}
		lo, hi = min(lo, t), max(hi, t)
	}
	mid := lo + (hi-lo)/2
	for id, t := range o.lowAt {
		if t <= mid && t != hi {
			delete(o.lowAt, id)
		}
	}
}
