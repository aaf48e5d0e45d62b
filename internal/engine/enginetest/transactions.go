package enginetest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// Transactions is what a sink written with transaction-meta=true holds
// of its source transactions, as a consumer that applies each
// transaction at once reads it (verify.Transactions, which checks it).
type Transactions = verify.Transactions

// ReadTransactions reads every data file of a file:// sink.
func ReadTransactions(t testing.TB, sinkURI string) *Transactions {
	t.Helper()
	u, err := url.Parse(sinkURI)
	if err != nil || u.Scheme != "file" {
		t.Fatalf("ReadTransactions reads a file:// sink, not %q", sinkURI)
	}
	tx := verify.NewTransactions()
	err = filepath.WalkDir(u.Path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasPrefix(d.Name(), "CDC_") || !strings.HasSuffix(d.Name(), ".json") {
			return err
		}
		rel, _ := filepath.Rel(u.Path, p)
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 16<<20)
		record := strings.HasPrefix(rel, "cdcctl-transaction"+string(filepath.Separator))
		for sc.Scan() {
			if err := add(tx, sc.Bytes(), record); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// ReadKafkaTransactions reads a Kafka sink's topic and its transaction
// topic (<topic>-transaction) as a read_committed consumer (franz-go's),
// until a second brings nothing written before the read began: what a
// sink wrote before it is read whole where one broker serves every
// partition (one fetch covers them all) and no transaction of the
// sink's stays open (a read_committed fetch stops at one: an
// exactly-once sink's reader would need the partitions' stable offsets).
func ReadKafkaTransactions(t testing.TB, brokers []string, topic string) *Transactions {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic, topic+"-transaction"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	tx := verify.NewTransactions()
	// Read until two polls in a row bring nothing produced before the
	// read began: a running changefeed writes a watermark to every
	// partition every second, so waiting for polls that bring nothing
	// at all ended only by chance (7 to 12 s of a test's time, alone).
	// Quiet polls count only once records came: on a loaded machine the
	// client's first second (metadata, the first fetch) once returned
	// nothing and the topics were read as empty.
	began, seen := time.Now(), false
	for quiet := 0; quiet < 2; {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		n, old := 0, 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			if r.Timestamp.Before(began) {
				old++
			}
			if err == nil {
				err = add(tx, r.Value, r.Topic != topic)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(began) > 2*time.Minute {
			t.Fatalf("the topics %s and %s-transaction still bring what was written before the read began, 2 minutes on", topic, topic)
		}
		switch {
		case old > 0:
			quiet, seen = 0, true
		case n > 0:
			quiet, seen = quiet+1, true
		case seen || time.Since(began) > 30*time.Second:
			quiet++
		}
	}
	return tx
}

// add takes one message: a BEGIN or END record, or a row change (a DDL
// or a watermark is passed over).
func add(tx *Transactions, line []byte, record bool) error {
	if record {
		return tx.AddRecordLine(line)
	}
	var m struct {
		Database, Table string
		IsDdl           bool
		Data            []map[string]any
		Transaction     *codec.TxnPlace
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return err
	}
	if m.IsDdl || len(m.Data) == 0 {
		return nil
	}
	tx.AddRow(m.Database+"."+m.Table, m.Transaction)
	return nil
}
