package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcctl/cdcctl/internal/engine/sink/compat"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// A consumer of the Kafka sink's topic written from the format documents
// (package compat, not our codec) with its own Kafka client (franz-go,
// not sarama): every message is a documented Canal-JSON message, every
// partition ends with a watermark, each key's changes come in commit
// order within its partition, and the rows up to the checkpoint are
// exactly the changes the source made up to it (verify's count).
func TestAConsumerWrittenFromTheFormatDocsReadsTheTopic(t *testing.T) {
	t.Parallel()
	c := broker(t, "cdc")
	uri := fmt.Sprintf("kafka://%s/cdc?protocol=canal-json", strings.Join(c.ListenAddrs(), ","))
	s := open(t, uri)
	g := live(t, "gen://?tables=3&keys=100&rate=3000&ddl_every=500ms")
	var runs []run
	for _, table := range g.TableNames() {
		runs = append(runs, startDispatcher(t, g, s, table+"-p0.1", 1, model.Span{Table: table}, g.TableVersion(0)))
	}
	time.Sleep(time.Second)
	var upTo model.Ts
	for i, r := range runs {
		if f := stop(t, r); i == 0 || f < upTo {
			upTo = f
		}
	}
	if err := s.WriteCheckpoint(context.Background(), upTo); err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Kafka(context.Background(), g, uri, upTo)
	if err != nil || !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("verify: %+v (%v)", rep, err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("cdc"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	type pk struct {
		partition int32
		key       string
	}
	last := map[pk]uint64{}
	watermark := map[int32]uint64{}
	rows, ddls := 0, 0
	for idle := 0; idle < 3; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			row, err := compat.DecodeCanal(r.Value, compat.Table{Database: "gen"})
			if err != nil {
				t.Fatalf("partition %d offset %d: %v\n%s", r.Partition, r.Offset, err, r.Value)
			}
			switch row.Type {
			case compat.Watermark:
				watermark[r.Partition] = row.CommitTs
			case compat.DDL:
				ddls++
			default:
				k := pk{r.Partition, row.Key}
				if row.CommitTs < last[k] {
					t.Errorf("partition %d: key %s at commit %d after %d", r.Partition, row.Key, row.CommitTs, last[k])
				}
				last[k] = row.CommitTs
				if row.CommitTs <= uint64(upTo) {
					rows++ // verify expects the source's changes up to the checkpoint
				}
			}
		})
		if n == 0 {
			idle++
		}
	}
	if uint64(rows) != rep.Expected || ddls == 0 {
		t.Fatalf("the consumer read %d rows and %d DDLs; the source made %d rows", rows, ddls, rep.Expected)
	}
	for p := int32(0); p < 4; p++ {
		if watermark[p] != uint64(upTo) {
			t.Errorf("partition %d's last watermark is %d, want the checkpoint %d", p, watermark[p], upTo)
		}
	}
}
