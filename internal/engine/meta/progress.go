package meta

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/model"
)

// A changefeed's partition positions are stored in shards: one key per
// group of partition ids (progress/<shard>), so that a changefeed of
// 100,000 partitions does not write one 7 MB value a second (etcd refuses
// a request over 1.5 MiB by default: one key stopped the checkpoint at
// about 20,000 partitions), and a save writes only the shards that
// changed. A changefeed saved before shards has one key (progress); it
// is read until its maintainer's next save rewrites it as shards.

// progressShards is how many shards the partition ids hash into: at
// 1,000,000 partitions a shard holds about 4,000 (~300 KB).
const progressShards = 256

// ProgressShard is the shard that holds a partition's position: the
// FNV-1a hash of its id, its shard's name two hex digits. Computed
// inline into a name made once: through hash/fnv and fmt it was three
// allocations a partition, on every save of every partition's position.
func ProgressShard(pid string) string {
	h := uint32(fnvOffset32)
	for i := 0; i < len(pid); i++ {
		h ^= uint32(pid[i])
		h *= fnvPrime32
	}
	return shardNames[h%progressShards]
}

// FNV-1a's 32-bit parameters (hash/fnv's).
const (
	fnvOffset32 = 2166136261
	fnvPrime32  = 16777619
)

// shardNames are the shards' names, as stored in etcd's keys.
var shardNames = func() (out [progressShards]string) {
	for i := range out {
		out[i] = fmt.Sprintf("%02x", i)
	}
	return out
}()

// legacyShard stands for the record from before shards.
const legacyShard = ""

// ownedMap names a map a state may change in place (see State.owned).
type ownedMap struct {
	kind keyKind
	cf   model.ChangefeedID
	sub  int
}

const (
	ownProgress = iota
	ownProgressShards
)

// mine reports whether the state already made its own copy of a map since
// it was cloned, and from now on takes it as its own: the caller copies it
// once (when this returns false), then changes it in place. A watch
// response of a hundred partitions, or a load of all of them, copies each
// changefeed's map once, not once per key. size is the map's length, what
// the copy costs (Copied).
func (s *State) mine(kind keyKind, cf model.ChangefeedID, sub, size int) bool {
	k := ownedMap{kind, cf, sub}
	if s.owned[k] {
		return true
	}
	s.owned[k] = true
	s.copied += size
	return false
}

// Copied is how many entries of inner maps (a changefeed's routing table,
// its positions) this state copied since it was cloned: what its changes
// cost beyond the clone itself.
func (s *State) Copied() int { return s.copied }

// applyProgress puts or deletes one shard of a changefeed's positions
// (legacyShard: the record from before shards). Progress merges them: a
// partition's position in its own shard wins over the legacy record's.
// A record that does not decode leaves the positions as they were.
func (s *State) applyProgress(id model.ChangefeedID, shard string, kv *mvccpb.KeyValue, deleted bool) {
	var fresh map[string]ProgressRecord
	if !deleted {
		table, err := model.DecodeProgressEntries(kv.Value)
		if err != nil {
			return
		}
		fresh = make(map[string]ProgressRecord, len(table))
		for _, e := range table {
			fresh[e.Partition] = ProgressRecord{Progress: e.Progress, Revision: kv.ModRevision}
		}
	}
	merged, shards := s.Progress[id], s.progressShards[id]
	if !s.mine(kindChangefeed, id, ownProgress, len(merged)) || merged == nil {
		merged = cloneMap(merged)
	}
	if !s.mine(kindChangefeed, id, ownProgressShards, len(shards)) || shards == nil {
		shards = cloneShards(shards)
	}
	old := shards[shard]
	if deleted {
		delete(shards, shard)
	} else {
		shards[shard] = fresh
	}
	for pid := range old {
		if _, again := fresh[pid]; again {
			continue
		}
		// Gone from this record: the other record's word, if any.
		if r, ok := shards[otherShard(shard, pid)][pid]; ok {
			merged[pid] = r
		} else {
			delete(merged, pid)
		}
	}
	for pid, r := range fresh {
		if shard == legacyShard {
			if _, own := shards[ProgressShard(pid)][pid]; own {
				continue
			}
		}
		merged[pid] = r
	}
	if len(shards) == 0 {
		delete(s.Progress, id)
		delete(s.progressShards, id)
		return
	}
	s.Progress[id], s.progressShards[id] = merged, shards
}

// otherShard is where else a partition's position may be: its own shard
// for the legacy record, the legacy record for its own shard.
func otherShard(shard, pid string) string {
	if shard == legacyShard {
		return ProgressShard(pid)
	}
	return legacyShard
}

func cloneShards(m map[string]map[string]ProgressRecord) map[string]map[string]ProgressRecord {
	c := make(map[string]map[string]ProgressRecord, len(m)+1)
	for k, v := range m {
		c[k] = v
	}
	return c
}

// progressOps are the writes that make a changefeed's stored positions
// table, given what st holds: the shards whose content changed, the
// deletion of shards left empty, and, the first time, the rewrite of a
// record from before shards (every shard, then its deletion). only, if
// set, limits the shards written to those holding these partitions (""
// holds none).
func (s *Store) progressOps(st *State, cf model.ChangefeedID, table model.ProgressTable, only ...string) []clientv3.Op {
	var prev map[string]map[string]ProgressRecord
	if st != nil {
		prev = st.progressShards[cf]
	}
	_, legacy := prev[legacyShard]
	var wanted map[string]bool
	if len(only) > 0 && !legacy {
		wanted = map[string]bool{}
		for _, pid := range only {
			if pid != "" {
				wanted[ProgressShard(pid)] = true
			}
		}
	}
	// Only the shards to write are grouped: a save of the checkpoint
	// alone (only "", most of a maintainer's saves) groups none, where it
	// hashed and grouped all of a changefeed's partitions to write none.
	next := map[string]model.ProgressTable{}
	if wanted == nil || len(wanted) > 0 {
		for pid, p := range table {
			sh := ProgressShard(pid)
			if wanted != nil && !wanted[sh] {
				continue
			}
			if next[sh] == nil {
				next[sh] = model.ProgressTable{}
			}
			next[sh][pid] = p
		}
	}
	var ops []clientv3.Op
	for sh, t := range next { // only the wanted shards
		if legacy || !sameShard(prev[sh], t) {
			ops = append(ops, clientv3.OpPut(s.keys.ChangefeedProgressShard(cf, sh), mustJSON(t)))
		}
	}
	for sh := range prev {
		if sh != legacyShard && next[sh] == nil && (wanted == nil || wanted[sh]) {
			ops = append(ops, clientv3.OpDelete(s.keys.ChangefeedProgressShard(cf, sh)))
		}
	}
	if legacy {
		ops = append(ops, clientv3.OpDelete(s.keys.ChangefeedProgress(cf)))
	}
	return ops
}

func sameShard(stored map[string]ProgressRecord, t model.ProgressTable) bool {
	if len(stored) != len(t) {
		return false
	}
	for pid, p := range t {
		if r, ok := stored[pid]; !ok || r.Progress != p {
			return false
		}
	}
	return true
}

// maxTxnBytes keeps a transaction's values well under etcd's default
// request limit (1.5 MiB).
const maxTxnBytes = 1 << 20

// commitInChunks commits ops in transactions of at most
// maxOpsPerTxn operations and maxTxnBytes, each under cmps; last
// goes into the final one with its own comparisons. A later chunk that
// fails leaves the earlier ones written: callers write only what is
// safe to land alone (positions never go back).
func (s *Store) commitInChunks(ctx context.Context, cmps []clientv3.Cmp, ops []clientv3.Op, lastCmps []clientv3.Cmp, last ...clientv3.Op) error {
	var chunk []clientv3.Op
	size := 0
	for _, op := range ops {
		n := len(op.KeyBytes()) + len(op.ValueBytes())
		if len(chunk) > 0 && (len(chunk) >= maxOpsPerTxn || size+n > maxTxnBytes) {
			if err := s.commit(ctx, cmps, chunk...); err != nil {
				return err
			}
			chunk, size = nil, 0
		}
		chunk, size = append(chunk, op), size+n
	}
	lastSize := 0
	for _, op := range last {
		lastSize += len(op.KeyBytes()) + len(op.ValueBytes())
	}
	// The last ops (a changefeed's status, whose source position may be
	// most of a megabyte) count too: with a full chunk they made a
	// request over etcd's limit, and the checkpoint never advanced.
	if len(chunk) > 0 && (len(chunk)+len(last) > maxOpsPerTxn || size+lastSize > maxTxnBytes) {
		if err := s.commit(ctx, cmps, chunk...); err != nil {
			return err
		}
		chunk = nil
	}
	chunk = append(chunk, last...)
	if len(chunk) == 0 {
		return nil
	}
	return s.commit(ctx, append(append([]clientv3.Cmp(nil), cmps...), lastCmps...), chunk...)
}
