package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/cdcctl/cdcctl/internal/configfile"
	"github.com/cdcctl/cdcctl/internal/engine/capture"
	"github.com/cdcctl/cdcctl/internal/playground"
	"github.com/cdcctl/cdcctl/internal/redact"
	"github.com/cdcctl/cdcctl/internal/version"
)

// Main is the cdc-agent program. cmd/cdc-agent calls it.
func Main() {
	os.Exit(execute(invokedAs(os.Args[0]), os.Args[1:], os.Stdout, os.Stderr))
}

// invokedAs is the program's name in its help: cdcctl, when 'cdcctl
// playground' started this binary in its place (its argv[0] is cdcctl),
// so that 'cdcctl playground --help' reads "cdcctl playground [flags]"
// as every cdcctl command's usage line does, not cdc-agent's.
func invokedAs(argv0 string) string {
	if filepath.Base(argv0) == "cdcctl" {
		return "cdcctl"
	}
	return "cdc-agent"
}

// ExitRestart is the agent's exit code after a graceful stop that a
// rollout asked for ('cdcctl rollout restart') or SIGHUP: its service manager
// starts it again (the shipped systemd unit's and compose file's
// Restart=on-failure take any exit but 0; Kubernetes restarts any exit;
// the playground restarts it).
// EX_TEMPFAIL: try again.
const ExitRestart = 75

// Execute runs the agent with arguments and returns its exit code:
// 0 after a graceful stop, 1 on a start-up or runtime error, 64 on bad
// flags or configuration, ExitRestart when a rollout asked it to restart.
func Execute(args []string, stdout, stderr io.Writer) int {
	return execute("cdc-agent", args, stdout, stderr)
}

// execute is Execute for a program named name in its help (invokedAs).
func execute(name string, args []string, stdout, stderr io.Writer) int {
	cmd, run := NewCommand()
	cmd.Use = name
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	if err := cmd.Execute(); err != nil {
		var ue usageError
		var pe playground.UsageError
		usage := errors.As(err, &ue) || errors.As(err, &pe)
		report(stderr, name, err, usage)
		if usage {
			return 64
		}
		return 1
	}
	if errors.Is(run.err, capture.ErrRestartRequested) {
		fmt.Fprintf(stderr, "cdc-agent: stopped gracefully to restart (%v); exit %d: the service manager starts it again\n", run.err, ExitRestart)
		return ExitRestart
	}
	if run.err != nil {
		var ue usageError
		usage := errors.As(run.err, &ue)
		report(stderr, name, run.err, usage)
		if usage {
			return 64
		}
		return 1
	}
	return 0
}

// report writes the error that ends the program, masked as its logs are
// (an opener's error quotes the URL it refused: a --checkpoint-store's
// secrets). Run as 'cdcctl playground' it reads as cdcctl's own errors
// do ("Error: …", and where to find the usage), not as cdc-agent's: the
// operator typed cdcctl.
func report(stderr io.Writer, name string, err error, usage bool) {
	if name != "cdcctl" {
		fmt.Fprintln(stderr, name+":", redact.Text(err.Error()))
		return
	}
	fmt.Fprintln(stderr, "Error:", redact.Text(err.Error()))
	if usage {
		fmt.Fprintln(stderr, "Run 'cdcctl playground --help' for usage.")
	}
}

// errHangUp ends a run stopped by SIGHUP: the agent exits ExitRestart,
// as when a rollout asks (it is capture.ErrRestartRequested).
var errHangUp error = hangUp{}

type hangUp struct{}

func (hangUp) Error() string        { return "SIGHUP asked it to restart" }
func (hangUp) Is(target error) bool { return target == capture.ErrRestartRequested }

type usageError struct{ error }

type runResult struct{ err error }

// NewCommand builds the cobra command with every flag bound to viper:
// flag > CDC_AGENT_* environment > --config file > default.
func NewCommand() (*cobra.Command, *runResult) {
	res := &runResult{}
	v := viper.New()
	cmd := &cobra.Command{
		Use:   "cdc-agent",
		Short: "One node of a cdcctl change-data-capture cluster",
		Long: `cdc-agent joins a replication cluster through etcd, takes part in electing the
coordinator and serves the HTTP API that cdcctl talks to.

Without --etcd it starts an embedded single-node etcd in --data-dir.
Every flag can also come from the environment (CDC_AGENT_NODE_ID, ...) or
from a YAML/TOML/JSON file given with --config.`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := configFrom(v, cmd.Flags())
			if err != nil {
				return usageError{err}
			}
			log := newLogger(cmd.ErrOrStderr(), cfg.LogLevel, cfg.LogFormat)
			node, err := New(cfg, log)
			if err != nil {
				return usageError{err}
			}
			signalled, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			// After the first signal, restore the default handling: a second
			// Ctrl-C ends a shutdown that hangs (etcd unreachable, say).
			// (Its own variable: the goroutine read ctx while it was
			// assigned again below, a data race.)
			go func() {
				<-signalled.Done()
				stop()
			}()
			// SIGHUP: stop as gracefully as on SIGTERM, then exit
			// ExitRestart, so that the service manager starts the agent
			// again (one capture restarted by hand or by a rollout's
			// hook, 'cdcctl rollout upgrade --exec'). Without this Go's
			// default ends the process at once, as a crash.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			ctx, hangUp := context.WithCancel(signalled)
			defer hangUp()
			hupped := make(chan struct{})
			go func() {
				select {
				case <-hup:
					close(hupped)
					hangUp()
				case <-ctx.Done():
				}
			}()
			res.err = node.Run(ctx)
			select {
			case <-hupped:
				if res.err == nil {
					res.err = errHangUp
				}
			default:
			}
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	// The playground runs here, not in cdcctl: it runs etcd and these
	// agents, which the operator's tool does not link.
	pg := playground.NewCommand()
	pg.SilenceUsage, pg.SilenceErrors = true, true
	cmd.AddCommand(pg)
	f := cmd.Flags()
	d := Defaults
	f.String("config", "", "configuration file (YAML, TOML or JSON)")
	f.String("node-id", "", "this node's id (default <hostname>-<port of --addr>)")
	f.String("addr", d.Addr, "API listen address")
	f.String("advertise-addr", "", "API address other nodes and cdcctl use (default: the listen address)")
	f.StringSlice("etcd", nil, "etcd endpoints, comma-separated (default: start an embedded etcd)")
	f.String("cluster-id", d.ClusterID, "cluster id; clusters sharing an etcd are kept apart by it")
	f.String("data-dir", d.DataDir, "directory for the embedded etcd and local state")
	f.Duration("session-ttl", d.SessionTTL, "lease TTL of this node's registration; a crashed node is noticed after this long")
	f.String("election", d.Election, "coordinator election backend: etcd, or mysql (a lock row in --election-dsn's database)")
	f.String("election-dsn", "", "MySQL/MariaDB DSN of the election database, user:password@tcp(host:3306)/database (implies --election mysql)")
	f.Duration("election-ttl", 0, "TTL of the MySQL election lock; the leader renews every third of it (default: --session-ttl)")
	f.String("checkpoint-store", d.CheckpointStore, "where partition states go when partitions move or split: etcd, or a bucket URL for large states (file:///dir, s3://bucket?region=..., gs://bucket)")
	f.Int("sink-memory-mib", d.SinkMemoryMiB, "encoded rows all storage sinks of this capture hold together, in MiB (each sink's spool-max-bytes still bounds it); writes wait above it")
	f.Int("log-memory-mib", d.LogMemoryMiB, "newest rows all event logs of this capture keep in memory together, in MiB; older ones are read back from the logs' files")
	f.String("sink-root", "", "directory every file:// sink must be under; a changefeed whose sink is elsewhere is refused (default: <data-dir>/sinks)")
	f.String("tls-cert-file", "", "certificate (PEM) this agent serves its API and transport with, and presents to other agents; its common name is the node id")
	f.String("tls-key-file", "", "private key (PEM) of --tls-cert-file")
	f.String("tls-ca-file", "", "CA certificates (PEM) that sign every agent's certificate: agents verify each other with it")
	f.String("etcd-cacert", "", "CA certificates (PEM) of an etcd served over TLS (https:// endpoints)")
	f.String("etcd-cert", "", "client certificate (PEM) for an etcd that requires one")
	f.String("etcd-key", "", "private key (PEM) of --etcd-cert")
	f.String("etcd-user", "", "etcd user, for an etcd with authentication enabled")
	f.String("etcd-password", "", "password of --etcd-user (better: the environment, CDC_AGENT_ETCD_PASSWORD; ps shows flags)")
	f.Bool("insecure", false, "listen on a non-loopback --addr without TLS and tokens (only on a network you trust)")
	f.String("token-auth-file", "", "static token file, one token,user,role per line (roles: viewer, operator, admin); every API request then needs a bearer token (docs/security.md)")
	f.Bool("pprof", true, "serve Go's profiler under /debug/pprof/ (admin role with --token-auth-file); --pprof=false turns it off")
	f.Bool("metrics-need-token", false, "with --token-auth-file, /metrics needs a viewer token too (default: open, like /healthz and /readyz)")
	f.Duration("move-timeout", d.MoveTimeout, "a partition move or split whose source has not stopped the partition within this long is reverted")
	f.Duration("follow-tables-every", d.FollowTablesEvery, "how often changefeeds with table rules (tables=public.*) look for tables created, dropped or renamed upstream")
	f.String("embed-etcd-addr", d.EmbedEtcdAddr, "client address of the embedded etcd (only without --etcd)")
	f.String("log-level", d.LogLevel, "debug, info, warn or error")
	f.String("log-format", d.LogFormat, "text or json")
	_ = v.BindPFlags(f)
	v.SetEnvPrefix("CDC_AGENT")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	return cmd, res
}

func configFrom(v *viper.Viper, flags *pflag.FlagSet) (Config, error) {
	if path := v.GetString("config"); path != "" {
		if err := configfile.Check(path, flags); err != nil {
			return Config{}, fmt.Errorf("read --config %s: %w", path, err)
		}
		v.SetConfigFile(path)
		if err := v.ReadInConfig(); err != nil {
			return Config{}, fmt.Errorf("read --config %s: %w", path, err)
		}
	}
	cfg := Config{
		NodeID:            v.GetString("node-id"),
		Addr:              v.GetString("addr"),
		AdvertiseAddr:     v.GetString("advertise-addr"),
		Etcd:              v.GetStringSlice("etcd"),
		ClusterID:         v.GetString("cluster-id"),
		DataDir:           v.GetString("data-dir"),
		SessionTTL:        v.GetDuration("session-ttl"),
		Election:          v.GetString("election"),
		ElectionDSN:       v.GetString("election-dsn"),
		ElectionTTL:       v.GetDuration("election-ttl"),
		MoveTimeout:       v.GetDuration("move-timeout"),
		FollowTablesEvery: v.GetDuration("follow-tables-every"),
		SinkMemoryMiB:     v.GetInt("sink-memory-mib"),
		LogMemoryMiB:      v.GetInt("log-memory-mib"),
		SinkRoot:          v.GetString("sink-root"),
		TokenAuthFile:     v.GetString("token-auth-file"),
		TLSCertFile:       v.GetString("tls-cert-file"),
		TLSKeyFile:        v.GetString("tls-key-file"),
		TLSCAFile:         v.GetString("tls-ca-file"),
		Insecure:          v.GetBool("insecure"),
		EtcdCACert:        v.GetString("etcd-cacert"),
		EtcdCert:          v.GetString("etcd-cert"),
		EtcdKey:           v.GetString("etcd-key"),
		EtcdUser:          v.GetString("etcd-user"),
		EtcdPassword:      v.GetString("etcd-password"),
		MetricsNeedToken:  v.GetBool("metrics-need-token"),
		Pprof:             v.GetBool("pprof"),
		CheckpointStore:   v.GetString("checkpoint-store"),
		EmbedEtcdAddr:     v.GetString("embed-etcd-addr"),
		LogLevel:          v.GetString("log-level"),
		LogFormat:         v.GetString("log-format"),
	}
	return cfg, cfg.Validate()
}

func newLogger(w io.Writer, level, format string) *slog.Logger {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		lv = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
