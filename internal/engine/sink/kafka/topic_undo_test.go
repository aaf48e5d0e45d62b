package kafka_test

import (
	"context"
	"slices"
	"testing"

	"github.com/IBM/sarama"

	"github.com/cdcctl/cdcctl/internal/engine/sink/registry"
)

// A changefeed create probes its sink before its source: a probe that
// created the topic gives the create a way to remove it again if the
// source is then refused (before, every refused create left its topic).
// A topic that existed before the probe is never removed.
func TestARefusedCreateRemovesTheTopicItsProbeCreated(t *testing.T) {
	t.Parallel()
	c := broker(t, "existing")
	addr := c.ListenAddrs()[0]
	topics := func() []string {
		t.Helper()
		client, err := sarama.NewClient([]string{addr}, sarama.NewConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		if err := client.RefreshMetadata(); err != nil {
			t.Fatal(err)
		}
		names, err := client.Topics()
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	env := registry.Env{Log: quiet()}
	_, undo, err := registry.Probe(context.Background(), "kafka://"+addr+"/fresh?partition-num=2", env)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(topics(), "fresh") {
		t.Fatalf("the probe did not create topic fresh: %v", topics())
	}
	undo()
	if names := topics(); slices.Contains(names, "fresh") {
		t.Fatalf("the refused create left its topic: %v", names)
	}
	// An open refused after it created the topic (fewer partitions
	// than the keys are hashed over) removes it itself.
	if _, _, err := registry.Probe(context.Background(), "kafka://"+addr+"/short?partition-num=2&hash-partitions=4", env); err == nil {
		t.Fatal("a topic of 2 partitions for keys hashed over 4 was taken")
	}
	if names := topics(); slices.Contains(names, "short") {
		t.Fatalf("the refused open left the topic it created: %v", names)
	}
	_, undo, err = registry.Probe(context.Background(), "kafka://"+addr+"/existing", env)
	if err != nil {
		t.Fatal(err)
	}
	undo()
	if names := topics(); !slices.Contains(names, "existing") {
		t.Fatalf("undoing a probe removed a topic that existed before it: %v", names)
	}
}
