// Package storage is the cloud-storage sink (file://, mem://, s3://, gs://
// and azblob:// through gocloud.dev/blob). It writes TiCDC's documented layout so that existing
// consumers can read it:
//
//	<schema>/<table>/meta/schema_<table-version>_<checksum>.json
//	<schema>/<table>/<table-version>/[<date>/]CDC_<dispatcher>_<index>.<ext>
//	<schema>/<table>/<table-version>/[<date>/]meta/CDC_<dispatcher>.index
//	metadata                                  {"checkpoint-ts": N}
//
// (<date> with date-separator: 2026, 2026-11 or 2026-11-25.)
//
// Data and index files carry the dispatcher id (TiCDC's layout for tables
// split across nodes), so dispatchers never write the same file. It keeps
// the two-stage ack of package sink: Write returns once rows are encoded
// into the sink's bounded buffer; a batch is flushed-acked only after its
// data file and the index file naming it are written.
//
// It imports model, engine/row, bucket, redact, sink and sink/codec.
package storage

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/redact"
)

// Protocol is the file encoding.
type Protocol = codec.Protocol

const (
	ProtocolCanalJSON = codec.ProtocolCanalJSON
	ProtocolCSV       = codec.ProtocolCSV
)

// Config is the storage sink's part of a sink URI.
type Config struct {
	// BucketURL is the URI without the sink's own parameters, as gocloud
	// opens it.
	BucketURL     string
	Protocol      Protocol
	FileSize      int64
	FlushInterval time.Duration
	// MaxFlushDelay: a dispatcher's oldest buffered row forces a flush
	// after at most this long (seed 004), so acks are not locked to
	// FlushInterval when files never fill. 0 turns it off.
	MaxFlushDelay time.Duration
	// StateTTL is how long a partition's file numbering and a table's
	// known schema files are kept unused; after that they are read back
	// from the bucket when needed (seed 004's per-table state TTL).
	StateTTL time.Duration
	// WriteTimeout bounds one flush's writes; a hung bucket fails the
	// flush (the dispatcher resumes from its checkpoint) instead of
	// holding its slot.
	WriteTimeout time.Duration
	// RetryTimeout is how long a refused upload (a full or throttling
	// bucket, a failing disk) is tried again, under the same name, before
	// the flush fails and the dispatcher resumes from its checkpoint,
	// which writes again what its files already held. 0: not retried.
	RetryTimeout time.Duration
	// SpoolMaxBytes bounds encoded rows held before they are written; a
	// full spool makes Write wait (backpressure). A partition's file is
	// written once it reaches FileSize or a quarter of the spool, which
	// is smaller: a hot table then has one file being written while the
	// next fills, instead of a full spool waiting for one big write.
	SpoolMaxBytes int64
	// Spool is where encoded rows wait for their flush: SpoolMemory,
	// SpoolDisk (segment files under SpoolDir; disk.go), or SpoolBucket
	// (a file:// bucket's own temporary files, renamed into place at the
	// flush; staged.go).
	Spool    string
	SpoolDir string
	// MaxActiveTables and MaxBufferedBytes are seed 004's fanout caps:
	// while more partitions than MaxActiveTables hold rows no flush has
	// taken, or those rows exceed MaxBufferedBytes (0: half the spool),
	// the oldest are flushed at once instead of waiting for their delay
	// or interval. They keep the rows waiting for a flush, and the files
	// one tick would start, bounded when very many tables change at once.
	MaxActiveTables  int
	MaxBufferedBytes int64
	// DateSeparator adds a date directory under each table version, as
	// TiCDC's date-separator does: DateNone (the default), DateYear
	// (2026), DateMonth (2026-11) or DateDay (2026-11-25), the UTC date
	// the rows reached the sink.
	DateSeparator string
	// Schema is the database name directories start with.
	Schema string
	// Delivery is DeliveryAtLeastOnce (default) or DeliveryExactlyOnce:
	// every flush of a partition then ends with a progress object, and a
	// partition resumes after it (progress.go).
	Delivery string
	// TransactionMeta writes source transactions' boundaries: each
	// canal-json row carries its transaction's id and place, and each
	// transaction's BEGIN and END records go to files under
	// cdcctl-transaction/ (docs/transactions.md).
	TransactionMeta bool
}

// The deliveries a storage sink offers.
const (
	DeliveryAtLeastOnce = "at-least-once"
	DeliveryExactlyOnce = "exactly-once"
)

// Date separators.
const (
	DateNone  = "none"
	DateYear  = "year"
	DateMonth = "month"
	DateDay   = "day"
)

// dateLayouts are the date directories' forms, by separator.
var dateLayouts = map[string]string{DateYear: "2006", DateMonth: "2006-01", DateDay: "2006-01-02"}

// Spool kinds.
const (
	SpoolMemory = "memory"
	SpoolDisk   = "disk"
	SpoolBucket = "bucket"
)

// diskSpoolDefault is spool-max-bytes of a disk spool unless set: a disk
// holds far more than the memory a sink should take.
const diskSpoolDefault = 1 << 30

// Defaults follow TiCDC's storage sink where it has one.
var Defaults = Config{Protocol: ProtocolCanalJSON, FileSize: 64 << 20, FlushInterval: 5 * time.Second, MaxFlushDelay: 200 * time.Millisecond, WriteTimeout: time.Minute, RetryTimeout: 10 * time.Second, StateTTL: time.Hour, SpoolMaxBytes: 64 << 20, Spool: SpoolMemory, DateSeparator: DateNone, MaxActiveTables: 10000, Schema: "gen", Delivery: DeliveryAtLeastOnce}

// fileTarget is the buffered size at which a partition's rows are
// written as a file: file-size, or a quarter of the spool if smaller.
func (c Config) fileTarget() int64 {
	return max(1, min(c.FileSize, c.SpoolMaxBytes/4))
}

// bufferedCap is the soft cap on rows waiting for a flush: the fanout
// cap's bytes, half the spool unless set.
func (c Config) bufferedCap() int64 {
	if c.MaxBufferedBytes > 0 {
		return min(c.MaxBufferedBytes, c.SpoolMaxBytes)
	}
	return c.SpoolMaxBytes / 2
}

// ChangeableOptions are the parameters a paused changefeed's storage
// sink may change (changefeed update --sink-option): how it writes, not
// where nor in which form (protocol, schema, date-separator) nor where
// it spools (spool, spool-dir: checked against the capture's sink root
// at creation).
var ChangeableOptions = []string{"file-size", "flush-interval", "max-flush-delay", "fsync", "write-timeout", "retry-timeout", "state-ttl", "spool-max-bytes", "max-active-tables", "max-buffered-bytes", "delivery", sink.TransactionMetaOption}

// FixedOptions are the storage sink's other parameters: known, but
// they cannot change on a changefeed (any other is a bucket's own, or
// unknown).
var FixedOptions = []string{"protocol", "schema", "date-separator", "spool", "spool-dir"}

// Schemes the sink opens.
var Schemes = []string{"file", "mem", "s3", "gs", "azblob"}

// ParseURI splits a sink URI into the sink's configuration and the bucket
// URL, refusing what it does not understand.
func ParseURI(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("sink URI %s: %v", redact.URI(raw), redact.ParseError(err))
	}
	known := false
	for _, s := range Schemes {
		known = known || u.Scheme == s
	}
	if !known {
		return Config{}, fmt.Errorf("sink URI %s: storage sinks take %s://", redact.URI(raw), strings.Join(Schemes, "://, "))
	}
	if u.Scheme == "file" && (u.Path == "" || u.Host != "") {
		return Config{}, fmt.Errorf("sink URI %s: use an absolute path, file:///path/to/dir", redact.URI(raw))
	}
	if u.Scheme != "file" && u.Scheme != "mem" && u.Host == "" {
		what := map[string]string{"s3": "bucket", "gs": "bucket", "azblob": "container"}[u.Scheme]
		return Config{}, fmt.Errorf("sink URI %s: name the %s, %s://%s/prefix", redact.URI(raw), what, u.Scheme, what)
	}
	c := Defaults
	q := u.Query()
	for key, vs := range q {
		v := vs[len(vs)-1]
		var perr error
		switch key {
		case "protocol":
			switch Protocol(v) {
			case ProtocolCanalJSON, ProtocolCSV:
				c.Protocol = Protocol(v)
			default:
				perr = fmt.Errorf("unknown protocol: use canal-json or csv")
			}
		case "file-size":
			c.FileSize, perr = sink.ParseBytes(v, 1024, 1<<32)
		case "flush-interval":
			c.FlushInterval, perr = durationBetween(v, 10*time.Millisecond, 10*time.Minute, "10ms and 10m")
		case "max-flush-delay":
			c.MaxFlushDelay, perr = durationBetween(v, 0, 10*time.Minute, "0s (off) and 10m")
		case "state-ttl":
			c.StateTTL, perr = durationBetween(v, 100*time.Millisecond, 24*time.Hour, "100ms and 24h")
		case "write-timeout":
			c.WriteTimeout, perr = durationBetween(v, 100*time.Millisecond, time.Hour, "100ms and 1h")
		case "retry-timeout":
			c.RetryTimeout, perr = durationBetween(v, 0, time.Hour, "0s (off) and 1h")
		case "spool-max-bytes":
			c.SpoolMaxBytes, perr = sink.ParseBytes(v, 1<<20, 1<<50)
		case "max-active-tables":
			c.MaxActiveTables, perr = strconv.Atoi(v)
			if perr != nil || c.MaxActiveTables < 1 || c.MaxActiveTables > 10_000_000 {
				perr = fmt.Errorf("must be a number of partitions between 1 and 10000000")
			}
		case "max-buffered-bytes":
			c.MaxBufferedBytes, perr = sink.ParseBytes(v, 64<<10, 1<<50)
		case "spool":
			c.Spool = v
			if v != SpoolMemory && v != SpoolDisk && v != SpoolBucket {
				perr = fmt.Errorf("use memory (the default), disk or bucket (file:// only)")
			}
		case "spool-dir":
			c.SpoolDir = v
			if !filepath.IsAbs(v) {
				perr = fmt.Errorf("must be an absolute directory on the capture's machine")
			}
		case "date-separator":
			c.DateSeparator = v
			if _, ok := dateLayouts[v]; !ok && v != DateNone {
				perr = fmt.Errorf("use none (the default), year, month or day")
			}
		case "delivery":
			c.Delivery = v
			if v != DeliveryAtLeastOnce && v != DeliveryExactlyOnce {
				perr = fmt.Errorf("use %s (the default) or %s", DeliveryAtLeastOnce, DeliveryExactlyOnce)
			}
		case sink.TransactionMetaOption:
			c.TransactionMeta, perr = sink.ParseBool(v)
		case "schema":
			c.Schema = v
			if v == "" || strings.ContainsAny(v, "/\\") {
				perr = fmt.Errorf("must be a non-empty name without slashes")
			}
		case "fsync":
			// The file:// bucket's own (bucket.Open), checked here so that
			// a changefeed is refused at create or update, not when its
			// sinks open.
			if u.Scheme != "file" {
				perr = fmt.Errorf("only a file:// sink takes it (an object store makes an object durable itself); leave it out")
			} else if v != "true" && v != "false" {
				perr = fmt.Errorf("use true (the default: every file durable before it counts as written) or false (a scratch directory, a tmpfs)")
			}
			if perr == nil {
				continue
			}
		default:
			continue // the bucket's own parameters (region, endpoint, ...)
		}
		if perr != nil {
			return Config{}, fmt.Errorf("sink URI: %s=%q: %v", key, redact.Value(key, v), perr)
		}
		q.Del(key)
	}
	if c.TransactionMeta && c.Protocol != ProtocolCanalJSON {
		return Config{}, fmt.Errorf("sink URI %s: transaction-meta=true needs protocol=canal-json: a CSV row has no place for its transaction's id and position", redact.URI(raw))
	}
	if c.Spool == SpoolBucket && u.Scheme != "file" {
		return Config{}, fmt.Errorf("sink URI %s: spool=bucket writes the rows into the files' own temporary files, which only a file:// bucket has: use spool=memory or spool=disk", redact.URI(raw))
	}
	if c.Spool != SpoolMemory && !u.Query().Has("spool-max-bytes") {
		// Rows waiting on disk: far more than the memory a sink
		// should take.
		c.SpoolMaxBytes = diskSpoolDefault
	}
	// A disk spool without spool-dir goes into the agent's own
	// (Env.SpoolDir), chosen when the sink opens.
	if c.Spool != SpoolDisk && c.SpoolDir != "" {
		return Config{}, fmt.Errorf("sink URI %s: spool-dir is the disk spool's directory: add spool=disk, or leave spool-dir out", redact.URI(raw))
	}
	if u.Scheme != "file" {
		// In object stores the path is a prefix inside the bucket, which
		// gocloud takes as the "prefix" parameter.
		if p := strings.Trim(u.Path, "/"); p != "" {
			q.Set("prefix", p+"/")
		}
		u.Path = ""
	}
	u.RawQuery = q.Encode()
	c.BucketURL = u.String()
	return c, nil
}

// durationBetween parses a duration and refuses one outside [lo, hi],
// naming the bounds as given.
func durationBetween(v string, lo, hi time.Duration, bounds string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if d < lo || d > hi {
		return 0, fmt.Errorf("must be between %s", bounds)
	}
	return d, nil
}
