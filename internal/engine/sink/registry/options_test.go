package registry

import (
	"strings"
	"testing"
)

// A changefeed's sink changes how it writes, never where nor in which
// form; a secret's value is never shown; a bad value is refused as a
// create refuses it.
func TestSetOptionsChangesOnlyWhatIsSafe(t *testing.T) {
	next, changes, err := SetOptions("file:///data/shop?flush-interval=5s&protocol=csv", map[string]string{"flush-interval": "1s", "file-size": "1048576", "protocol": "canal-json"})
	if err == nil || !strings.Contains(err.Error(), "sink option protocol cannot change on a changefeed") || !strings.Contains(err.Error(), "changeable: file-size, flush-interval") {
		t.Fatalf("protocol: %v %v", next, err)
	}
	next, changes, err = SetOptions("file:///data/shop?flush-interval=5s&protocol=csv", map[string]string{"flush-interval": "1s", "file-size": "1048576", "state-ttl": ""})
	if err != nil {
		t.Fatal(err)
	}
	if next != "file:///data/shop?file-size=1048576&flush-interval=1s&protocol=csv" {
		t.Fatalf("next %s", next)
	}
	if got := strings.Join(changes, "; "); got != "file-size: (default) → 1048576; flush-interval: 5s → 1s" {
		t.Fatalf("changes %q", got)
	}
	if _, _, err := SetOptions("file:///data/shop", map[string]string{"flush-interval": "forever"}); err == nil || !strings.Contains(err.Error(), "flush-interval") {
		t.Fatalf("a bad value: %v", err)
	}
	next, changes, err = SetOptions("kafka://127.0.0.1:9092/t?sasl-user=u&sasl-password=old", map[string]string{"sasl-password": "new", "retry-timeout": "10s"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(next, "sasl-password=new") || strings.Contains(strings.Join(changes, " "), "new") || strings.Join(changes, "; ") != "retry-timeout: (default) → 10s; sasl-password: changed" {
		t.Fatalf("kafka: %s %q", next, changes)
	}
	if _, _, err := SetOptions("kafka://127.0.0.1:9092/t", map[string]string{"partition": "table"}); err == nil || !strings.Contains(err.Error(), "partition cannot change") {
		t.Fatalf("kafka partitioning: %v", err)
	}
	// A changefeed created before the pin is pinned; a pin is never
	// taken away (keys would move once partitions are added).
	if next, _, err := SetOptions("kafka://127.0.0.1:9092/t", map[string]string{"hash-partitions": "3"}); err != nil || next != "kafka://127.0.0.1:9092/t?hash-partitions=3" {
		t.Fatalf("pinning: %s %v", next, err)
	}
	if _, _, err := SetOptions("kafka://127.0.0.1:9092/t?hash-partitions=3", map[string]string{"hash-partitions": ""}); err == nil || !strings.Contains(err.Error(), "hash-partitions cannot be removed") {
		t.Fatalf("unpinning: %v", err)
	}
	if _, _, err := SetOptions("blackhole://", map[string]string{"x": "1"}); err == nil {
		t.Fatal("a blackhole sink's options changed")
	}
}

// An option no sink has is called unknown, naming those that can change
// (it was refused as one that "cannot change", as if the sink had it);
// one the sink has but cannot change is refused as before, and so is a
// cloud bucket's own parameter (where the rows are).
func TestAnUnknownSinkOptionIsCalledUnknown(t *testing.T) {
	for _, tc := range []struct{ uri, opt, says string }{
		{"file:///data/shop", "bogus", "sink option bogus is unknown: the options of a file:// sink that can change are file-size, flush-interval, max-flush-delay"},
		{"kafka://127.0.0.1:9092/t", "bogus", "sink option bogus is unknown: the options of a kafka:// sink that can change are hash-partitions, max-message-bytes"},
		{"file:///data/shop", "date-separator", "sink option date-separator cannot change on a changefeed"},
		{"kafka://127.0.0.1:9092/t", "replication-factor", "sink option replication-factor cannot change on a changefeed"},
		{"s3://bucket/shop", "region", "sink option region cannot change on a changefeed"},
	} {
		if _, _, err := SetOptions(tc.uri, map[string]string{tc.opt: "1"}); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s %s=1: %v, want %q", tc.uri, tc.opt, err, tc.says)
		}
	}
}
