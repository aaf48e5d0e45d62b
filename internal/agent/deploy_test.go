package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/configfile"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka/kafkatest"
)

// The files in deploy/ are what an operator installs as they are: the
// Grafana dashboard and the alert rules must read metrics that exist,
// the example config must start an agent, the systemd unit must run it
// as a non-root user and stop it gracefully.
func TestDeployFilesReadRealMetrics(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "deploy")
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	body, err := os.ReadFile(filepath.Join(root, "grafana", "cdcctl.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(body, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	body, err = os.ReadFile(filepath.Join(root, "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(body, &rules); err != nil {
		t.Fatalf("the alert rules are not YAML: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" || alerts[r.Alert] {
				t.Errorf("alert rule %+v: want a unique name, an expression, a summary and a description", r)
			}
			alerts[r.Alert] = true
			exprs = append(exprs, r.Expr)
		}
	}
	if len(dash.Panels) < 10 || len(alerts) < 6 {
		t.Fatalf("%d panels and %d alerts", len(dash.Panels), len(alerts))
	}

	// A cluster replicating into a storage sink and into Kafka has every
	// series the files read, between its agents (the coordinator exports
	// the plan series, the agents whose dispatchers wrote to Kafka the
	// Kafka client's).
	kc, err := kafkatest.Start(1, "deploy", 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	tc := newTestCluster(t)
	tc.startCaptures(2)
	c := tc.client()
	tc.runDemo(c, demoSource, "file://"+t.TempDir()+"?flush-interval=100ms", time.Second)
	if _, err := c.CreateChangefeed(context.Background(), api.ChangefeedCreateRequest{ID: "to-kafka", Source: "gen://?tables=2&keys=10&rate=50", Sink: "kafka://" + kc.Addrs() + "/deploy"}); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, e := range exprs {
		for _, n := range regexp.MustCompile(`\b(cdcctl_[a-z0-9_]+|process_[a-z_]+)`).FindAllString(e, -1) {
			names[n] = true
		}
	}
	// A series appears once its first sample is taken (a broker's bytes
	// after its first answered request): wait for all of them, a while.
	var missing []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		exported := map[string]bool{}
		for _, n := range tc.nodes {
			for _, line := range strings.Split(tc.get(n.addr, "/metrics"), "\n") {
				if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
					f := strings.Fields(name)
					exported[f[0]] = true
					if len(f) > 1 && f[1] == "histogram" {
						for _, s := range []string{"_bucket", "_sum", "_count"} {
							exported[f[0]+s] = true
						}
					}
				}
			}
		}
		missing = missing[:0]
		for n := range names {
			// A database changefeed's upstream series need a database:
			// this cluster replicates the generator.
			if n == "cdcctl_source_retained_bytes" || n == "cdcctl_source_retention_headroom_seconds" {
				continue
			}
			if !exported[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the dashboard or alerts read series no agent exports (after 30 s of replication into storage and Kafka): %s", strings.Join(missing, ", "))
	}

	// The example config is one the agent accepts, key by key.
	cmd, _ := NewCommand()
	if err := configfile.Check(filepath.Join(root, "systemd", "cdc-agent.yaml"), cmd.Flags()); err != nil {
		t.Errorf("the example config: %v", err)
	}
	unit, err := os.ReadFile(filepath.Join(root, "systemd", "cdc-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nExecStart=/usr/bin/cdc-agent --config /etc/cdcctl/cdc-agent.yaml\n", "\nUser=cdc-agent\n", "\nKillSignal=SIGINT\n", "\nRestart=on-failure\n", "\nWantedBy=multi-user.target\n"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("the systemd unit lacks %q", strings.TrimSpace(want))
		}
	}
}
