// Package playground runs a local cluster for trying cdcctl: an embedded
// etcd inside this process and N cdc-agent processes on loopback, each a
// separate OS process so that an operator can kill one. It runs in
// cdc-agent ('cdc-agent playground'; 'cdcctl playground' starts that), so
// the operator's tool links neither etcd's server nor a database driver.
//
// It imports api (to wait for readiness), embedetcd, certs (--secure),
// pgserver and mysqlserver (the demo databases) and the MySQL election's
// DSN check; it starts agents only as processes and never imports the
// rest of the engine.
package playground

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/embedetcd"
)

// Config describes the playground to start.
type Config struct {
	Nodes int
	Dir   string
	// PortBase: etcd listens on PortBase, capture-i's API on PortBase+i.
	PortBase   int
	SessionTTL time.Duration
	// FollowTablesEvery is the agents' --follow-tables-every (0: theirs).
	FollowTablesEvery time.Duration
	// Agent is the command that starts an agent; see AgentCommand.
	Agent AgentCommand
	// NoDemo skips the demo changefeed.
	NoDemo bool
	// Postgres also starts a private PostgreSQL on PortBase+10 with a
	// live workload, and changefeed demo-pg replicating it.
	Postgres bool
	// MySQL also starts a private MariaDB with its binary log on
	// PortBase+12, a live workload, and changefeed demo-mysql
	// replicating it.
	MySQL bool
	// Kafka also starts a Kafka broker (kfake, in this process) on
	// PortBase+13 for kafka:// sinks (kafka.go).
	Kafka bool
	// Election is the agents' election backend: "" or etcd, or mysql.
	// With mysql and no ElectionDSN, a private MariaDB is started on
	// PortBase+11 for it.
	Election    string
	ElectionDSN string
	// SinkRoot is the captures' --sink-root: file:// sinks of
	// changefeeds must be under it (default Dir/sinks).
	SinkRoot string
	// Secure gives the captures TLS (a private CA in Dir/secure) and
	// tokens (an admin and a viewer token there).
	Secure bool
	// Fresh clears what an earlier run left in Dir (etcd's data with
	// its changefeeds and plans, the agents' data, the demo databases,
	// keys, sinks under the default root) before starting.
	Fresh bool
	Out   io.Writer // the operator's terminal
}

// AgentCommand says how to start cdc-agent: Path run with Argv0 as its
// argv[0].
type AgentCommand struct {
	Path  string
	Argv0 string
}

// FindAgent is this executable, under the name cdc-agent: the playground
// runs in cdc-agent.
func FindAgent() (AgentCommand, error) {
	self, err := os.Executable()
	if err != nil {
		return AgentCommand{}, fmt.Errorf("cannot find this executable to start agents: %w", err)
	}
	return AgentCommand{Path: self, Argv0: "cdc-agent"}, nil
}

// State is DIR/playground.json: what scripts need to find the cluster.
type State struct {
	Version  int       `json:"version"`
	Etcd     string    `json:"etcd"`
	Server   string    `json:"server"` // value for CDCCTL_SERVER
	Dir      string    `json:"dir"`
	PID      int       `json:"pid"` // the playground process
	Captures []Capture `json:"captures"`
	// Demo is the demo changefeed's sink, if one was created.
	Demo string `json:"demo_sink,omitempty"`
	// Postgres is the playground's PostgreSQL (--postgres), demo-pg's
	// source, and DemoPG its sink.
	Postgres string `json:"postgres,omitempty"`
	DemoPG   string `json:"demo_pg_sink,omitempty"`
	// MySQL is the playground's MariaDB for demo-mysql (--mysql),
	// demo-mysql's source, and DemoMySQL its sink.
	MySQL     string `json:"mysql,omitempty"`
	DemoMySQL string `json:"demo_mysql_sink,omitempty"`
	// Kafka is the playground's Kafka broker (--kafka), host:port.
	Kafka string `json:"kafka,omitempty"`
	// ElectionDSN is the MySQL election's database (--election mysql),
	// without its password; ElectionPID the private MariaDB's pid.
	ElectionDSN string `json:"election_dsn,omitempty"`
	ElectionPID int    `json:"election_pid,omitempty"`
	// With --secure: the CA to trust (CDCCTL_CA_FILE) and the tokens'
	// files (cdcctl --token-file).
	CAFile          string `json:"ca_file,omitempty"`
	AdminTokenFile  string `json:"admin_token_file,omitempty"`
	ViewerTokenFile string `json:"viewer_token_file,omitempty"`
	// Reused: the cluster state is an earlier run's in the same Dir.
	Reused bool `json:"reused,omitempty"`
}

// Capture is one agent process of the playground.
type Capture struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	PID     int    `json:"pid"`
	Log     string `json:"log"`
}

// CheckPorts refuses a --nodes or --port-base the playground cannot run
// with, naming the range that works: the command says so as a flag's
// error (exit 64) before anything starts.
func CheckPorts(cfg Config) error {
	if cfg.Nodes < 1 || cfg.Nodes > 9 {
		return fmt.Errorf("--nodes must be between 1 and 9, got %d", cfg.Nodes)
	}
	// The highest port it listens on: the last capture's API, or a
	// database's or Kafka's above them.
	top := cfg.Nodes
	for _, p := range []struct {
		on     bool
		offset int
	}{{cfg.Postgres, 10}, {cfg.Election == "mysql" && cfg.ElectionDSN == "", 11}, {cfg.MySQL, 12}, {cfg.Kafka, kafkaPort}} {
		if p.on {
			top = max(top, p.offset)
		}
	}
	if cfg.PortBase < 1024 || cfg.PortBase+top > 65535 {
		return fmt.Errorf("--port-base %d is out of range: use 1024 to %d (the playground listens on port-base to port-base+%d)", cfg.PortBase, 65535-top, top)
	}
	return nil
}

// Run starts the playground and keeps it until ctx ends, then stops every
// agent (SIGTERM, then SIGKILL after 15s) and etcd.
func Run(ctx context.Context, cfg Config) error {
	if err := CheckPorts(cfg); err != nil {
		return err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return err
	}
	if cfg.Fresh {
		if err := clearEarlierRun(dir, cfg); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create playground directory: %w", err)
	}
	// An earlier run's etcd is kept: its changefeeds, plans and drained
	// captures come back. Said in the banner, with the way out.
	_, statErr := os.Stat(filepath.Join(dir, "etcd"))
	reused := statErr == nil
	if reused {
		// Said now as well as in the banner: a start interrupted before
		// its banner has still told what it started on.
		fmt.Fprintf(cfg.Out, "reusing the cluster state of an earlier run in %s (its changefeeds and plans come back; --fresh starts anew)\n", dir)
	}
	for i := 0; i <= cfg.Nodes; i++ {
		if err := portFree(cfg.PortBase + i); err != nil {
			return fmt.Errorf("port %d is taken (%v); stop whatever uses it, or pick other ports with --port-base", cfg.PortBase+i, err)
		}
	}
	var db *demoDB
	if cfg.Postgres {
		// Started first so it stops last: the agents' readers stop
		// before the server they read.
		if err := portFree(cfg.PortBase + 10); err != nil {
			return fmt.Errorf("port %d (the playground's PostgreSQL) is taken (%v); pick other ports with --port-base", cfg.PortBase+10, err)
		}
		fmt.Fprintln(cfg.Out, "starting PostgreSQL for demo-pg...")
		if db, err = startDemoDB(ctx, dir, cfg.PortBase+10); err != nil {
			return err
		}
		defer db.stop()
	}
	var my *demoMySQL
	if cfg.MySQL {
		// Started before the agents so it stops after them.
		fmt.Fprintln(cfg.Out, "starting MariaDB for demo-mysql...")
		if my, err = startDemoMySQL(ctx, dir, cfg.PortBase+12); err != nil {
			return err
		}
		defer my.stop()
	}
	var broker string
	if cfg.Kafka {
		if err := portFree(cfg.PortBase + kafkaPort); err != nil {
			return fmt.Errorf("port %d (the playground's Kafka) is taken (%v); pick other ports with --port-base", cfg.PortBase+kafkaPort, err)
		}
		kc, err := startKafka(dir, cfg.PortBase+kafkaPort)
		if err != nil {
			return err
		}
		// Closed after the agents stop (deferred before them): their
		// sinks' last writes still reach it.
		defer kc.Close()
		broker = addr(cfg.PortBase + kafkaPort)
	}
	electionPID := 0
	if cfg.ElectionDSN != "" && cfg.Election == "" {
		cfg.Election = "mysql"
	}
	if err := CheckElectionFlags(cfg); err != nil {
		return err
	}
	if cfg.ElectionDSN != "" {
		if err := checkElectionDB(ctx, cfg.ElectionDSN); err != nil {
			return err
		}
	}
	if cfg.Election == "mysql" && cfg.ElectionDSN == "" {
		// Started before the agents so it stops after them.
		fmt.Fprintln(cfg.Out, "starting MariaDB for the coordinator election...")
		edb, err := startElectionDB(ctx, dir, cfg.PortBase+11)
		if err != nil {
			return err
		}
		defer func() { _ = edb.Stop() }()
		cfg.ElectionDSN, electionPID = edb.DSN("cdcctl"), edb.PID()
	}
	var sec *secure
	if cfg.Secure {
		if sec, err = newSecure(dir, cfg.Nodes); err != nil {
			return fmt.Errorf("make the playground's certificates and tokens: %w", err)
		}
	}
	etcd, err := embedetcd.Start(sec.etcdConfig(embedetcd.Config{Dir: filepath.Join(dir, "etcd"), ClientAddr: addr(cfg.PortBase), Name: "playground"}))
	if err != nil {
		return err
	}
	defer etcd.Close()
	// The sinks' own directory, apart from the keys (secure/) and etcd's
	// data: a file:// sink may not write beside them.
	root := sinkRoot(cfg, dir)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("create the sink root: %w", err)
	}
	var children []*child
	defer func() { stopAll(children, cfg.Out) }()
	for i := 1; i <= cfg.Nodes; i++ {
		c, err := startAgent(cfg, dir, etcd.Endpoint(), i, sec)
		if err != nil {
			return err
		}
		children = append(children, c)
		if i == 1 && cfg.Nodes > 1 {
			// capture-1 first, alone, so that it is the coordinator: the
			// README's examples (drain capture-3, kill the coordinator)
			// then work as written on every start.
			if err := waitReady(ctx, children, 60*time.Second, sec); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
	}
	if err := waitReady(ctx, children, 60*time.Second, sec); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(cfg.Out, "\ninterrupted while starting; stopping the playground...")
			return nil
		}
		return err
	}
	st := State{Version: 1, Etcd: etcd.Endpoint(), Dir: dir, PID: os.Getpid(), ElectionPID: electionPID, Reused: reused, Kafka: broker}
	if cfg.ElectionDSN != "" {
		st.ElectionDSN = redactPassword(cfg.ElectionDSN)
	}
	var servers []string
	for _, c := range children {
		st.Captures = append(st.Captures, c.Capture)
		servers = append(servers, c.Address)
	}
	st.Server = strings.Join(sec.servers(servers), ",")
	if sec != nil {
		st.CAFile, st.AdminTokenFile, st.ViewerTokenFile = sec.caFile, sec.adminTokenFile, sec.viewerTokenFile
	}
	if !cfg.NoDemo {
		sink, err := createDemo(ctx, servers, root, sec)
		if err != nil {
			return err
		}
		st.Demo = sink
	}
	if db != nil {
		sink, err := createDemoPG(ctx, servers, root, db, sec)
		if err != nil {
			return err
		}
		st.Postgres, st.DemoPG = db.srv.DSN("demo"), sink
	}
	if my != nil {
		sink, err := createDemoMySQL(ctx, servers, root, my, sec)
		if err != nil {
			return err
		}
		st.MySQL, st.DemoMySQL = my.sourceURI(), sink
		my.run()
	}
	if err := writeState(filepath.Join(dir, "playground.json"), st); err != nil {
		return err
	}
	printBanner(cfg.Out, st)

	return supervise(ctx, cfg, dir, etcd.Endpoint(), sec, children, st)
}

// The demo changefeed: 8 tables of 1,000 keys, 1,000 changes a second, a
// DDL every 30s, into files under the playground's directory. Two
// partitions per table (16 in all): p7 is t0004 ["", "naaa"), so the
// README's `cdcctl partition split p7 --key m` cuts it as written.
const demoSource = "gen://?tables=8&keys=1000&rate=1000&ddl_every=30s"

func createDemo(ctx context.Context, servers []string, root string, sec *secure) (string, error) {
	return createFeed(ctx, servers, sec, api.ChangefeedCreateRequest{ID: "demo", Source: demoSource, PartitionsPerTable: 2}, root)
}

// createFeed creates one of the playground's changefeeds, its sink a
// directory named after it under root, unless an earlier run in the same
// directory did; it returns the sink.
func createFeed(ctx context.Context, servers []string, sec *secure, req api.ChangefeedCreateRequest, root string) (string, error) {
	client, err := newClient(sec, servers, time.Minute)
	if err != nil {
		return "", err
	}
	req.Sink = "file://" + filepath.Join(root, req.ID) + "?flush-interval=1s"
	if _, err := client.Changefeed(ctx, req.ID); err == nil {
		return req.Sink, nil // kept from an earlier run in the same directory
	}
	if _, err := client.CreateChangefeed(ctx, req); err != nil {
		return "", fmt.Errorf("create the %s changefeed: %w", req.ID, err)
	}
	return req.Sink, nil
}

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

func portFree(port int) error {
	l, err := net.Listen("tcp", addr(port))
	if err != nil {
		return err
	}
	return l.Close()
}

// sinkRoot is the directory the captures' file:// sinks must be under:
// DIR/sinks unless given, never DIR itself (it holds secure/ and etcd/).
func sinkRoot(cfg Config, dir string) string {
	if cfg.SinkRoot != "" {
		if abs, err := filepath.Abs(cfg.SinkRoot); err == nil {
			return abs
		}
		return cfg.SinkRoot
	}
	return filepath.Join(dir, "sinks")
}

func writeState(path string, st State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadState reads a playground.json.
func ReadState(path string) (State, error) {
	var st State
	b, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// clearEarlierRun removes what a playground writes in dir, and nothing
// else: dir may be one the operator named, holding other files.
func clearEarlierRun(dir string, cfg Config) error {
	names := []string{"etcd", "postgres", "mariadb", "mariadb-demo", "kafka", "secure", "playground.json"}
	if cfg.SinkRoot == "" {
		names = append(names, "sinks")
	}
	for i := 1; i <= 9; i++ {
		names = append(names, fmt.Sprintf("capture-%d", i), fmt.Sprintf("capture-%d.log", i))
	}
	for _, n := range names {
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("--fresh: %w", err)
		}
	}
	return nil
}
