package kafka

import (
	"hash/fnv"
	"testing"

	"github.com/IBM/sarama"
)

// A row's partition is the FNV-1a hash of its key modulo the partition
// count, whichever way it is computed: consumers (and rows already in a
// topic) rely on a key staying in its partition across versions.
func TestTheRowPartitionIsFNVOfItsKey(t *testing.T) {
	for _, key := range []string{"", "t0001/k1", "public.orders/42", "日本/ü", "a very long key " + string(make([]byte, 300))} {
		for _, n := range []int32{1, 3, 16, 97} {
			h := fnv.New32a()
			h.Write([]byte(key))
			want := int32(h.Sum32() % uint32(n))
			for _, k := range []sarama.Encoder{sarama.StringEncoder(key), sarama.ByteEncoder(key)} {
				got, err := partitioner{}.Partition(&sarama.ProducerMessage{Key: k, Metadata: &meta{partition: -1}}, n)
				if err != nil || got != want {
					t.Fatalf("key %q, %d partitions, %T: partition %d (%v), want %d", key, n, k, got, err, want)
				}
			}
		}
	}
}

// The gate's row hashes tell rows apart and find a row again.
func TestOrderKeysHashRowsApart(t *testing.T) {
	seen := map[uint64]string{}
	for i := 0; i < 20000; i++ {
		k := string(rune('a'+i%26)) + string(rune(i))
		h := hashString(hashByte(hashString(fnvOffset, "t"), 0), k)
		if other, dup := seen[h]; dup && other != k {
			t.Fatalf("rows %q and %q share a hash", k, other)
		}
		seen[h] = k
	}
}
