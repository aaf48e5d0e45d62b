package playground

import (
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// UsageError marks bad flags: the caller exits 64.
type UsageError struct{ error }

func (e UsageError) Unwrap() error { return e.error }

// NewCommand is "playground": cdc-agent runs it, and cdcctl playground
// starts cdc-agent with it, so that cdcctl links no engine.
func NewCommand() *cobra.Command {
	cfg := Config{}
	cmd := &cobra.Command{
		Use:   "playground",
		Short: "Run a local cluster: embedded etcd and N cdc-agent processes on loopback",
		Long: `Run a local cluster in the foreground: an embedded etcd in this process on
--port-base, and --nodes cdc-agent processes capture-1..capture-N with their
APIs on --port-base+1.., all on 127.0.0.1, and a demo changefeed (gen source,
8 tables, into files under DIR/sinks/demo) unless --no-demo. With --postgres it also
starts a private PostgreSQL (initdb in DIR/postgres, wal_level=logical,
loopback only, as the postgres user when run as root) on --port-base+10 with
a live workload, and changefeed demo-pg replicating it into DIR/sinks/demo-pg; it
needs the PostgreSQL server binaries (initdb, pg_ctl) on the PATH (Debian:
apt-get install postgresql). With --mysql it starts a private MariaDB with
its binary log on (DIR/mariadb-demo, loopback only) on --port-base+12 with a
live workload, and changefeed demo-mysql replicating it into
DIR/sinks/demo-mysql (changes from its creation on: docs/mysql.md); it needs
MariaDB (Debian: apt-get install mariadb-server). With --kafka it starts a
Kafka broker on --port-base+13 (kfake, a real-protocol broker inside the
playground's process, its topics kept in DIR/kafka; one broker, for trying
kafka:// sinks, not for keeping data). With --election mysql the captures elect their
coordinator through a lock row in MariaDB: a private one (mariadb-install-db
in DIR/mariadb, loopback only) on --port-base+11, or the server that
--election-dsn names. It writes DIR/playground.json
(etcd endpoint, each capture's address and pid) and each agent's log to
DIR/capture-N.log. It restarts nothing by itself, so you can kill a capture
and watch the cluster react. Ctrl-C stops everything.

It runs in cdc-agent (` + "`cdc-agent playground`" + `, or ` + "`go run ./cmd/cdc-agent playground`" + `
from a clone), which also runs the agents; ` + "`cdcctl playground`" + ` starts it from
the cdc-agent next to cdcctl or on the PATH.`,
		Example: `  cdc-agent playground
  cdcctl playground --postgres
  cdcctl playground --mysql
  cdcctl playground --kafka
  cdcctl playground --election mysql
  cdcctl playground --nodes 5 --port-base 9300 --dir /tmp/pg`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Dir == "" {
				cfg.Dir = filepath.Join(os.TempDir(), "cdcctl-playground-"+strconv.Itoa(cfg.PortBase))
			}
			if cfg.ElectionDSN != "" && cfg.Election == "" {
				cfg.Election = "mysql"
			}
			if err := CheckElectionFlags(cfg); err != nil {
				return UsageError{err}
			}
			if err := CheckPorts(cfg); err != nil {
				return UsageError{err}
			}
			agentCmd, err := FindAgent()
			if err != nil {
				return err
			}
			cfg.Agent = agentCmd
			cfg.Out = cmd.OutOrStdout()
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return Run(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Nodes, "nodes", 3, "number of captures (1-9)")
	f.StringVar(&cfg.Dir, "dir", "", "directory for etcd data, agent data and logs (default $TMPDIR/cdcctl-playground-<port-base>)")
	f.IntVar(&cfg.PortBase, "port-base", 8300, "etcd listens on this port, capture-i's API on port-base+i")
	f.DurationVar(&cfg.SessionTTL, "session-ttl", 10*time.Second, "agents' session TTL: how long a killed capture takes to be noticed")
	f.DurationVar(&cfg.FollowTablesEvery, "follow-tables-every", 0, "agents' --follow-tables-every: how often changefeeds with table rules look for new, dropped or renamed tables (default: theirs, 30s)")
	f.BoolVar(&cfg.NoDemo, "no-demo", false, "do not create the demo changefeed")
	f.BoolVar(&cfg.Fresh, "fresh", false, "start anew: remove what an earlier run left in --dir (etcd's data with its changefeeds and plans, the agents' data and logs, the demo databases, keys, and the sinks under the default --sink-root)")
	f.StringVar(&cfg.Election, "election", "", "the agents' coordinator election: etcd (default), or mysql (a private MariaDB on port base+11 unless --election-dsn names a server)")
	f.BoolVar(&cfg.Secure, "secure", false, "TLS (a private CA and a certificate per capture; etcd on TLS asking for them) and tokens (an admin and a viewer token) under --dir/secure; the banner says how to use them")
	f.StringVar(&cfg.SinkRoot, "sink-root", "", "directory the captures' file:// sinks must be under (default: --dir/sinks; never --dir itself, which holds the keys and etcd's data)")
	f.StringVar(&cfg.ElectionDSN, "election-dsn", "", "MySQL/MariaDB DSN for --election mysql, user:password@tcp(host:3306)/database (implies --election mysql)")
	f.BoolVar(&cfg.MySQL, "mysql", false, "also start a private MariaDB with its binary log on (port base+12, MariaDB installed) with a live workload, and changefeed demo-mysql replicating it")
	f.BoolVar(&cfg.Kafka, "kafka", false, "also start a Kafka broker for kafka:// sinks (port base+13; kfake, inside the playground, its topics in --dir/kafka)")
	f.BoolVar(&cfg.Postgres, "postgres", false, "also start a private PostgreSQL (port base+10, the PostgreSQL binaries on the PATH) with a live workload, and changefeed demo-pg replicating it")
	return cmd
}
