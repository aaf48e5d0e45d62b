package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Partitions added to a changefeed's topic, as operators do to scale its
// consumers, do not move a key to another partition: the create pinned
// the count its keys hash over (hash-partitions, shown in its sink URI),
// and a capture opening the sink after the change (here every partition
// moves to a capture started after it) writes each key where its earlier
// changes are. Without the pin, that capture hashed over the new count:
// a key's next changes went to another partition, where a consumer could
// read them before the older ones.
func TestPartitionsAddedToTheTopicDoNotMoveAKey(t *testing.T) {
	t.Parallel()
	c := broker(t, "cdc")
	addr := strings.Join(c.ListenAddrs(), ",")
	tc := enginetest.New(t, enginetest.Options{})
	first := tc.StartCaptures(1).Node
	info := tc.CreateChangefeed("k", "gen://?tables=2&keys=200&rate=500", fmt.Sprintf("kafka://%s/cdc", addr), 2)
	if !strings.HasSuffix(info.SinkURI, "?hash-partitions=4") {
		t.Fatalf("the changefeed keeps its sink as %q; want the topic's 4 partitions pinned", info.SinkURI)
	}
	tc.WaitCheckpoint("k", model.TsFromTime(time.Now()))

	admin, err := sarama.NewClusterAdmin(c.ListenAddrs(), sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.CreatePartitions("cdc", 8, nil, false); err != nil {
		t.Fatal(err)
	}
	// Every partition moves to a capture whose sink opens now.
	tc.Start("capture-2")
	if err := tc.Stop(first); err != nil {
		t.Fatal(err)
	}
	tc.WaitCheckpoint("k", model.TsFromTime(time.Now().Add(time.Second)))
	rep := tc.PauseAndVerify("k")
	if !rep.OK || rep.Lost != 0 {
		t.Fatalf("after partitions were added and the sink opened again: %+v", rep)
	}

	cfg, err := kafka.ParseURI(info.SinkURI)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	where := map[string]map[int32]bool{}
	rows := 0
	err = kafka.Scan(ctx, cfg, func(p int32, kind codec.MessageKind, r codec.Row, _ model.Ts) error {
		if kind != codec.MessageRow {
			return nil
		}
		rows++
		k := r.Table + "/" + r.Key
		if where[k] == nil {
			where[k] = map[int32]bool{}
		}
		where[k][p] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for k, ps := range where {
		for p := range ps {
			if p >= 4 || len(ps) > 1 {
				moved++
				if moved == 1 {
					t.Errorf("key %s is in partitions %v", k, ps)
				}
			}
		}
	}
	if moved > 0 || rows == 0 {
		t.Fatalf("%d of %d keys in more than one partition or in an added one (%d rows)", moved, len(where), rows)
	}
}

// A topic with fewer partitions than the changefeed hashes its keys over
// (deleted and created again smaller) is refused with the fix, rather
// than keys written to partitions it does not have.
func TestATopicWithFewerPartitionsThanPinnedIsRefused(t *testing.T) {
	t.Parallel()
	c := broker(t, "cdc")
	_, err := kafka.Open(context.Background(), fmt.Sprintf("kafka://%s/cdc?hash-partitions=8", strings.Join(c.ListenAddrs(), ",")), quiet())
	if err == nil || !strings.Contains(err.Error(), `topic "cdc" has 4 partitions, fewer than the 8 this changefeed hashes its keys over (hash-partitions=8)`) ||
		!strings.Contains(err.Error(), "--partitions 8") {
		t.Fatalf("a sink pinned to 8 partitions of a topic of 4: %v", err)
	}
	s := open(t, fmt.Sprintf("kafka://%s/cdc?hash-partitions=2", strings.Join(c.ListenAddrs(), ",")))
	if pinned, err := s.Pin("kafka://x/cdc?hash-partitions=2"); err != nil || pinned != "kafka://x/cdc?hash-partitions=2" {
		t.Fatalf("a URI pinned already is kept as it is: %q, %v", pinned, err)
	}
}
