// Package gen is the built-in deterministic source: tables t0001..tNNNN,
// string keys that sort (base-26, spread so that "m" splits a table near
// its middle), each key updated on its own schedule with a per-key version
// number, and optional DDL every so often. Given (seed, table, key range,
// from-ts) it yields the same events every time, which is what lets verify
// know exactly what a sink must hold.
//
// It imports model, source and redact only.
package gen

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/redact"
)

// Config is a gen:// URI's parameters.
type Config struct {
	Tables int
	Keys   int // per table
	// Rate is the mean number of DML events per second over all tables.
	Rate float64
	// DDLEvery puts a DDL on every table this often; 0 means none.
	DDLEvery time.Duration
	// Deletes makes every Deletes-th change of a key a delete (the next
	// one inserts it again); 0 means none.
	Deletes int
	Seed    uint64
	// StartMillis is the source's epoch: the first changes come just after
	// it. A changefeed pins it when created, so the stream is the same
	// wherever and whenever it is read.
	StartMillis int64
}

// Limits keep one generator's state and verify's memory bounded.
const (
	MaxTables = 1000000
	MaxKeys   = 1000000
	MaxRate   = 10000000
)

var defaults = Config{Tables: 8, Keys: 10000, Rate: 2000, Seed: 1}

// ParseURI parses gen://?tables=8&keys=10000&rate=2000&ddl_every=30s&deletes=10&seed=1&start=<unix-ms>.
// Unknown parameters are refused, so a typo never silently uses a default.
func ParseURI(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("source URI %q: %v", raw, err)
	}
	if u.Scheme != "gen" {
		return Config{}, fmt.Errorf("source URI %q: scheme must be gen:// (the built-in generator)", raw)
	}
	if u.Host != "" || (u.Path != "" && u.Path != "/") {
		return Config{}, fmt.Errorf("source URI %q: gen takes only query parameters, e.g. gen://?tables=8&keys=10000", raw)
	}
	c := defaults
	q := u.Query()
	var unknown []string
	for k, vs := range q {
		if len(vs) != 1 {
			return Config{}, fmt.Errorf("source URI: parameter %q given %d times", k, len(vs))
		}
		v := vs[0]
		var perr error
		switch k {
		case "tables":
			c.Tables, perr = parseInt(v, 1, MaxTables)
		case "keys":
			c.Keys, perr = parseInt(v, 1, MaxKeys)
		case "rate":
			c.Rate, perr = strconv.ParseFloat(v, 64)
			if perr == nil && !(c.Rate > 0 && c.Rate <= MaxRate) {
				perr = fmt.Errorf("must be > 0 and ≤ %d", MaxRate)
			}
		case "ddl_every":
			c.DDLEvery, perr = time.ParseDuration(v)
			if perr == nil && c.DDLEvery != 0 && c.DDLEvery < time.Millisecond {
				perr = fmt.Errorf("must be 0 (no DDL) or at least 1ms")
			}
		case "deletes":
			c.Deletes, perr = parseInt(v, 0, MaxKeys)
			if perr == nil && c.Deletes == 1 {
				perr = fmt.Errorf("must be 0 (no deletes) or at least 2 (a key is inserted before it is deleted)")
			}
		case "seed":
			c.Seed, perr = strconv.ParseUint(v, 10, 64)
		case "start":
			c.StartMillis, perr = strconv.ParseInt(v, 10, 64)
			if perr == nil && c.StartMillis <= 0 {
				perr = fmt.Errorf("must be a positive Unix time in milliseconds")
			}
		default:
			unknown = append(unknown, k)
			continue
		}
		if perr != nil {
			return Config{}, fmt.Errorf("source URI: %s=%q: %v", k, redact.Value(k, v), perr)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Config{}, fmt.Errorf("source URI: unknown parameter(s) %s; gen takes tables, keys, rate, ddl_every, deletes, seed, start", strings.Join(unknown, ", "))
	}
	return c, nil
}

func parseInt(v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, err
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("must be between %d and %d", lo, hi)
	}
	return n, nil
}

// URI renders the config back; ParseURI(c.URI()) == c.
func (c Config) URI() string {
	q := url.Values{}
	q.Set("tables", strconv.Itoa(c.Tables))
	q.Set("keys", strconv.Itoa(c.Keys))
	q.Set("rate", strconv.FormatFloat(c.Rate, 'g', -1, 64))
	if c.DDLEvery > 0 {
		q.Set("ddl_every", c.DDLEvery.String())
	}
	if c.Deletes > 0 {
		q.Set("deletes", strconv.Itoa(c.Deletes))
	}
	q.Set("seed", strconv.FormatUint(c.Seed, 10))
	if c.StartMillis > 0 {
		q.Set("start", strconv.FormatInt(c.StartMillis, 10))
	}
	return "gen://?" + q.Encode()
}
