package kafka

import (
	"hash/fnv"
	"testing"
)

// A row's partition is the FNV-1a hash of its key modulo the partition
// count: consumers (and rows already in a topic) rely on a key staying in
// its partition across versions, and across releases of the sink.
func TestTheRowPartitionIsFNVOfItsKey(t *testing.T) {
	for _, key := range []string{"", "t0001/k1", "public.orders/42", "日本/ü", "a very long key " + string(make([]byte, 300))} {
		for _, n := range []int32{1, 3, 16, 97} {
			h := fnv.New32a()
			h.Write([]byte(key))
			want := int32(h.Sum32() % uint32(n))
			if got := keyPartition([]byte(key), n); got != want {
				t.Fatalf("key %q, %d partitions: partition %d, want %d", key, n, got, want)
			}
		}
	}
}
