package playground

import (
	"fmt"
	"path/filepath"

	"github.com/twmb/franz-go/pkg/kfake"
)

// The playground's Kafka (--kafka) is kfake, a broker that speaks Kafka's
// protocol, running inside the playground's process on loopback: a
// kafka:// sink writes to it as to a real cluster (topics created,
// transactions, consumer groups), and any Kafka client reads it back.
// It keeps its topics in DIR/kafka, so a restarted playground finds its
// changefeeds' topics where they were. One broker, no replication: for
// trying the Kafka sink and measuring its lag, not for keeping data.

// kafkaPort is the broker's port above --port-base.
const kafkaPort = 13

// startKafka starts the broker on port.
func startKafka(dir string, port int) (*kfake.Cluster, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(filepath.Join(dir, "kafka")))
	if err != nil {
		return nil, fmt.Errorf("start the playground's Kafka broker on port %d: %w", port, err)
	}
	return c, nil
}

// kafkaHint is the banner's line for the broker: how to send a
// changefeed into it.
func kafkaHint(broker string) hint {
	return hint{fmt.Sprintf("cdcctl changefeed create to-kafka --source 'gen://?tables=4&keys=100&rate=100' --sink 'kafka://%s/to-kafka'", broker),
		"Kafka (the playground's broker) at " + broker}
}
