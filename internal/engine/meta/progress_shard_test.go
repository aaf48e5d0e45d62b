package meta

import (
	"fmt"
	"hash/fnv"
	"testing"
)

// A partition's shard is part of the etcd key its position is stored
// under: the name computed inline must be the one hash/fnv and fmt gave,
// or a maintainer of this version would read none of the positions an
// earlier one wrote.
func TestProgressShardNamesTheShardEarlierVersionsWrote(t *testing.T) {
	ids := []string{"", "p1", "big/gen.t000001/0", "orders-3f2a", "é", "a very long partition id of a table with a long name, split many times"}
	for i := 0; i < 2000; i++ {
		ids = append(ids, fmt.Sprintf("p%d", i))
	}
	seen := map[string]bool{}
	for _, id := range ids {
		h := fnv.New32a()
		h.Write([]byte(id))
		want := fmt.Sprintf("%02x", h.Sum32()%progressShards)
		if got := ProgressShard(id); got != want {
			t.Fatalf("ProgressShard(%q) = %q, earlier versions stored it under %q", id, got, want)
		}
		seen[want] = true
	}
	if len(seen) != progressShards {
		t.Fatalf("2,006 ids fell into %d shards of %d", len(seen), progressShards)
	}
}
