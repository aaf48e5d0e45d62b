// Package agent assembles one cdc-agent node around a capture
// (engine/capture, which runs membership, the election, the coordinator,
// the maintainers and the dispatchers): etcd (embedded or remote), the
// HTTP API, /metrics, /healthz and /readyz, TLS and tokens.
//
// It may import everything below it (engine, api, embedetcd); only
// cmd/cdc-agent imports it.
package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
)

// Config is everything a node needs to start.
type Config struct {
	NodeID        string
	Addr          string // API listen address
	AdvertiseAddr string // what other nodes and operators use; default Addr
	Etcd          []string
	ClusterID     string
	DataDir       string
	SessionTTL    time.Duration
	// Election is the coordinator election's backend: etcd, or mysql (a
	// lock row in ElectionDSN's database); ElectionTTL is the MySQL
	// lock's TTL (default: SessionTTL).
	Election    string
	ElectionDSN string
	ElectionTTL time.Duration
	// MoveTimeout: a partition move or split whose source has not stopped
	// the partition within it is reverted (seed 003's failure table).
	MoveTimeout time.Duration
	// FollowTablesEvery is how often changefeeds with table rules
	// (tables=public.*) match them again, picking up new tables and
	// dropping removed ones.
	FollowTablesEvery time.Duration
	// CheckpointStore is where partition states go between nodes (seed
	// 003's CheckpointStore): "etcd", or a bucket URL for large states.
	CheckpointStore string
	// SinkMemoryMiB bounds the encoded rows all storage sinks of the node
	// hold together, whatever the number of changefeeds (seed 004).
	SinkMemoryMiB int
	// LogMemoryMiB bounds the newest rows all event logs of the node keep
	// in memory together; older ones are in the logs' files.
	LogMemoryMiB int
	// SinkRoot is the directory every file:// sink must be under; ""
	// means DataDir/sinks.
	SinkRoot string
	// TokenAuthFile, if set, is the static token file (token,user,role
	// lines): every API request then needs a bearer token of a role
	// that may make it. MetricsNeedToken puts /metrics behind it too.
	TokenAuthFile    string
	MetricsNeedToken bool
	// Pprof serves Go's profiler under /debug/pprof/: what an operator
	// attaches to a capture that is slow or growing, without a restart.
	Pprof bool
	// TLSCertFile, TLSKeyFile and TLSCAFile serve the API and the
	// transport over TLS; agents verify each other with the CA (tls.go).
	TLSCertFile, TLSKeyFile, TLSCAFile string
	// Insecure lets the agent listen beyond loopback without TLS and
	// tokens (a trusted network).
	Insecure bool
	// EtcdCACert, EtcdCert and EtcdKey reach etcd over TLS; EtcdUser and
	// EtcdPassword log in to etcd's own authentication (etcdctl's names).
	EtcdCACert, EtcdCert, EtcdKey string
	EtcdUser, EtcdPassword        string
	// EmbedEtcdAddr is the client address of the embedded etcd used when
	// Etcd is empty.
	EmbedEtcdAddr string
	LogLevel      string
	LogFormat     string // text or json
}

// Defaults are the values of every flag that has one.
var Defaults = Config{
	Addr:              "127.0.0.1:8301",
	ClusterID:         "default",
	DataDir:           "cdc-agent-data",
	SessionTTL:        10 * time.Second,
	Election:          "etcd",
	MoveTimeout:       30 * time.Second,
	FollowTablesEvery: 30 * time.Second,
	CheckpointStore:   "etcd",
	SinkMemoryMiB:     1024,
	LogMemoryMiB:      eventlog.DefaultMemory >> 20,
	EmbedEtcdAddr:     "127.0.0.1:2379",
	LogLevel:          "info",
	LogFormat:         "text",
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// Validate fills derived defaults and refuses what cannot work, saying how
// to fix it.
func (c *Config) Validate() error {
	// etcd's TLS files are read here, not at the first connection: a
	// missing --etcd-key or an unreadable certificate is a flag's error
	// (exit 64), named before anything starts.
	if _, err := c.etcdTLS(); err != nil {
		return err
	}
	if _, port, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("--addr %q is not host:port: %v", c.Addr, err)
	} else if err := checkPort("--addr", c.Addr, port, 0); err != nil {
		return err
	}
	if c.AdvertiseAddr != "" {
		host, port, err := net.SplitHostPort(c.AdvertiseAddr)
		if err != nil {
			return fmt.Errorf("--advertise-addr %q is not host:port: %v", c.AdvertiseAddr, err)
		}
		if err := checkPort("--advertise-addr", c.AdvertiseAddr, port, 1); err != nil {
			return err
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) || port == "0" {
			return fmt.Errorf("--advertise-addr %q must name this host and a port others can reach", c.AdvertiseAddr)
		}
	} else if host, _, _ := net.SplitHostPort(c.Addr); host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
		return fmt.Errorf("--addr %q listens on every interface, which other captures cannot dial; also set --advertise-addr to this host's reachable address", c.Addr)
	}
	if c.NodeID == "" {
		c.NodeID = defaultNodeID(c.Addr)
	}
	if !idPattern.MatchString(c.NodeID) {
		return fmt.Errorf("--node-id %q is not valid: use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", c.NodeID)
	}
	if !idPattern.MatchString(c.ClusterID) {
		return fmt.Errorf("--cluster-id %q is not valid: use 1-63 letters, digits, '.', '_' or '-'", c.ClusterID)
	}
	if c.CheckpointStore == "" {
		c.CheckpointStore = Defaults.CheckpointStore
	}
	if c.CheckpointStore != "etcd" && !strings.Contains(c.CheckpointStore, "://") {
		return fmt.Errorf("--checkpoint-store %q: give etcd, or a bucket URL (file:///dir, s3://bucket?region=..., gs://bucket)", c.CheckpointStore)
	}
	if c.MoveTimeout == 0 {
		c.MoveTimeout = Defaults.MoveTimeout
	}
	if c.FollowTablesEvery == 0 {
		c.FollowTablesEvery = Defaults.FollowTablesEvery
	}
	if c.FollowTablesEvery < time.Second {
		return fmt.Errorf("--follow-tables-every %s is too short: each round reads the database's catalog for every changefeed with table rules; use at least 1s (default 30s)", c.FollowTablesEvery)
	}
	if c.MoveTimeout < time.Second {
		return fmt.Errorf("--move-timeout %s is too short: a move needs its source to stop and report; use at least 1s (default 30s)", c.MoveTimeout)
	}
	if c.SinkMemoryMiB == 0 {
		c.SinkMemoryMiB = Defaults.SinkMemoryMiB
	}
	if c.SinkMemoryMiB < 16 {
		return fmt.Errorf("--sink-memory-mib %d is too small: the storage sinks of this capture share it; use at least 16 (default 1024)", c.SinkMemoryMiB)
	}
	if c.LogMemoryMiB == 0 {
		c.LogMemoryMiB = Defaults.LogMemoryMiB
	}
	if c.LogMemoryMiB < 1 {
		return fmt.Errorf("--log-memory-mib %d: give the MiB the event logs of this capture may keep in memory, at least 1 (default %d)", c.LogMemoryMiB, Defaults.LogMemoryMiB)
	}
	if c.SessionTTL < time.Second {
		return fmt.Errorf("--session-ttl %s is too short: etcd leases count whole seconds; use at least 1s (default 10s)", c.SessionTTL)
	}
	if err := c.validateElection(); err != nil {
		return err
	}
	if err := c.validateExposure(); err != nil {
		return err
	}
	var eps []string
	for _, e := range c.Etcd {
		for _, part := range strings.Split(e, ",") {
			if part = strings.TrimSpace(part); part != "" {
				eps = append(eps, part)
			}
		}
	}
	c.Etcd = eps
	if c.DataDir == "" {
		return errors.New("--data-dir must not be empty")
	}
	if c.LogLevel == "" {
		c.LogLevel = Defaults.LogLevel
	}
	if c.LogFormat == "" {
		c.LogFormat = Defaults.LogFormat
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return fmt.Errorf("--log-level %q: use debug, info, warn or error", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return fmt.Errorf("--log-format %q: use text or json", c.LogFormat)
	}
	return nil
}

// checkPort refuses a port no socket has, a flag's error: the listen
// would fail later, asking whether another agent runs there.
// (0 listens on any free port; others cannot be told to dial it.)
func checkPort(flag, addr, port string, lo int) error {
	if n, err := strconv.Atoi(port); err != nil || n < lo || n > 65535 {
		if port == "" {
			port = "none"
		}
		return fmt.Errorf("%s %q: the port must be a number from %d to 65535, got %s", flag, addr, lo, port)
	}
	return nil
}

// validateExposure refuses to serve beyond loopback without TLS and
// tokens: anyone who can reach the port could drain every capture and
// remove changefeeds. --insecure says the network itself is trusted.
func (c *Config) validateExposure() error {
	if c.Insecure || (c.TLSCertFile != "" && c.TokenAuthFile != "") {
		return nil
	}
	host, _, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return nil // --addr's own check says what is wrong
	}
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		return nil
	}
	var missing []string
	if c.TLSCertFile == "" {
		missing = append(missing, "TLS (--tls-cert-file, --tls-key-file, --tls-ca-file)")
	}
	if c.TokenAuthFile == "" {
		missing = append(missing, "tokens (--token-auth-file)")
	}
	return fmt.Errorf("--addr %s is reachable beyond this host, and the agent has no %s: anyone who reaches it could drain captures and remove changefeeds. Give it those (docs/security.md), listen on 127.0.0.1, or pass --insecure if the network is trusted", c.Addr, strings.Join(missing, " and no "))
}

// defaultNodeID is "<host>-<port>", stable across restarts on the same
// host and port.
func defaultNodeID(addr string) string {
	host, _ := os.Hostname()
	if host == "" {
		host = "capture"
	}
	host = strings.Split(host, ".")[0]
	_, port, _ := net.SplitHostPort(addr)
	return host + "-" + port
}

func (c *Config) etcdDir() string { return filepath.Join(c.DataDir, "etcd") }

// sinkRoot is the directory file:// sinks must be under, absolute.
func (c *Config) sinkRoot() string {
	root := c.SinkRoot
	if root == "" {
		root = filepath.Join(c.DataDir, "sinks")
	}
	if abs, err := filepath.Abs(root); err == nil {
		return abs
	}
	return root
}

// spoolDir holds the disk spools of storage sinks whose URI names no
// spool-dir: the agent's own disk, not a tmpfs /tmp may be.
func (c *Config) spoolDir() string { return filepath.Join(c.DataDir, "spool") }

// eventLogDir holds the event logs of the database readers this node runs.
func (c *Config) eventLogDir() string { return filepath.Join(c.DataDir, "eventlog") }

// validateElection checks the election flags: --election-dsn alone means
// mysql, and mysql needs a DSN that parses.
func (c *Config) validateElection() error {
	if c.Election == "" {
		c.Election = Defaults.Election
	}
	if c.ElectionDSN != "" && c.Election == "etcd" {
		c.Election = "mysql" // a DSN names the backend
	}
	switch c.Election {
	case "etcd":
	case "mysql":
		if c.ElectionDSN == "" {
			return errors.New("--election mysql needs --election-dsn user:password@tcp(host:3306)/database")
		}
		if _, err := election.ParseMySQLDSN(c.ElectionDSN); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--election %q: use etcd (default) or mysql", c.Election)
	}
	if c.ElectionTTL == 0 {
		c.ElectionTTL = c.SessionTTL
	}
	if c.ElectionTTL < time.Second {
		return fmt.Errorf("--election-ttl %s is too short: a leader renews every third of it; use at least 1s (default: --session-ttl)", c.ElectionTTL)
	}
	return nil
}
