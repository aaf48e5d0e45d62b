package postgres

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5"
)

// A value reaches the sink as the text PostgreSQL writes it in, and that
// text is the session's: DateStyle writes a date, TimeZone a timestamptz,
// extra_float_digits a float's digits (at 0, 0.30000000000000004 is
// written 0.3), bytea_output a bytea, IntervalStyle an interval,
// client_encoding every text (a LATIN1 database's é as one byte that is
// no UTF-8; pgx's simple protocol refuses to read at all then). A
// database or a role may set any of them (ALTER DATABASE ... SET), and so
// may the agent's environment (PGTZ), and each may
// change while a changefeed runs: the stream's walsender, the snapshot's
// sessions and verify's reads would then write the same row in different
// texts, and a row keyed by a time under two keys. So every connection of
// the source starts its session with the same settings, given with the
// connection (the startup message), which override the database's, the
// role's and the environment's.

// sessionPins are the settings every session starts with, unless the
// source URI gives the setting itself (as a driver parameter). always
// says a changefeed stored before the source fixed them gets it too:
// without those it could not read at all; the others would change the
// text of its values, keys included, in the middle of its life.
var sessionPins = []struct {
	name, value string
	always      bool
}{
	{"DateStyle", "ISO", false}, // the day order stays the server's; ISO output ignores it
	{"IntervalStyle", "postgres", false},
	{"extra_float_digits", "3", false}, // the shortest exact text from PostgreSQL 12 on; 17 digits before
	{"bytea_output", "hex", false},
	{"client_encoding", "UTF8", true},
	// Not a value's text: pgx's simple protocol, which the snapshot reads
	// with, writes its parameters as literals that need it.
	{"standard_conforming_strings", "on", true},
}

// sessionLimits are limits a database or a role may set that would cut
// the source's sessions: statement_timeout cancels a chunk's read of a
// large range (tried again at the same size, for ever) and the
// walsender's stream; idle_in_transaction_session_timeout ends a table
// without a key's copy, whose one transaction waits for its watermarks
// and between its fetches, and the copy begins again, writing the rows
// it had sent again. Off for the source's sessions, unless its URI sets
// them; not the changefeed's for life (Own).
var sessionLimits = []struct{ name, value string }{
	{"statement_timeout", "0"},
	{"idle_in_transaction_session_timeout", "0"},
}

// laterLimits are limits of later versions that would cut the source's
// sessions too: idle_session_timeout (PostgreSQL 14 on) ends the stream's
// catalog session, idle while the stream is resolved by transactions or
// by other changefeeds' ticks, and the stream ended at its next tick or
// held the next table whose columns changed ("cannot be read"), for an
// operator's resume; transaction_timeout (17 on) ends a table without a
// key's copy. The startup message cannot carry them (a server before
// them refuses a setting it does not know), so each long-lived session
// turns them off once connected (unlimit), unless the connection gave
// them (the URI's options=).
var laterLimits = []string{"idle_session_timeout", "transaction_timeout"}

// unlimit turns laterLimits off in conn's session where the server has
// them and a setting other than the connection's is on (the server's, a
// database's or a role's; pg_settings' source is "client" for one the
// connection gave: options=, or PGOPTIONS, which pgx reads).
func unlimit(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, "SELECT name FROM pg_settings WHERE name = ANY('{"+strings.Join(laterLimits, ",")+"}') AND source <> 'client' AND setting <> '0'")
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, err := conn.Exec(ctx, "SET "+n+" = 0"); err != nil {
			return err
		}
	}
	return nil
}

// zoneParam is the driver parameter that carries the time zone, spelled
// as pgx spells the one it reads from PGTZ: under another spelling both
// would reach the server, in no fixed order.
const zoneParam = "timezone"

// pinSession takes this package's parameters out of q, the source URI's
// query, leaving the driver's, and adds the session settings: the time
// zone (timezone=, UTC for a new changefeed) and sessionPins. A stored
// URI with a start but no time zone is a changefeed's from before the
// source fixed it: its sessions keep the server's zone and value texts,
// so its keys do not change, but for the settings without which nothing
// could be read.
func (c *Config) pinSession(q url.Values) error {
	var zones []string
	for k, vs := range q {
		if strings.EqualFold(k, "timezone") {
			zones = append(zones, vs...)
			q.Del(k)
		}
	}
	for k := range ours {
		q.Del(k)
	}
	switch {
	case len(zones) > 1:
		return fmt.Errorf("source URI: timezone given %d times: give it once", len(zones))
	case len(zones) == 1 && strings.TrimSpace(zones[0]) == "":
		return fmt.Errorf("source URI: timezone is empty: name the zone a timestamptz is written in, such as UTC (the default) or Europe/Berlin")
	case len(zones) == 1 && strings.ContainsFunc(zones[0], unicode.IsSpace):
		return fmt.Errorf("source URI: timezone=%q holds a space: a URI reads + as a space, so write a zone's + as %%2B (Etc/GMT%%2B5)", zones[0])
	case len(zones) == 1:
		c.TimeZone = zones[0]
	case c.Start == 0:
		c.TimeZone = "UTC"
	}
	stored := c.Start != 0 && c.TimeZone == "" // before the source fixed them
	if c.TimeZone != "" {
		q.Set(zoneParam, c.TimeZone)
	}
	c.pinned = nil
	for _, p := range sessionPins {
		if stored && !p.always {
			continue
		}
		if !hasParam(q, p.name) {
			q.Set(p.name, p.value)
			c.pinned = append(c.pinned, p.name)
		}
	}
	for _, p := range sessionLimits {
		if !hasParam(q, p.name) && !inOptions(q, p.name) {
			q.Set(p.name, p.value)
			c.pinned = append(c.pinned, p.name) // given again at every parse: not stored
		}
	}
	return nil
}

// inOptions says q's options= (command-line options for the server,
// -c name=value) sets the setting: the operator's, which a separate
// parameter would override.
func inOptions(q url.Values, name string) bool {
	for k, vs := range q {
		if strings.EqualFold(k, "options") {
			for _, v := range vs {
				if strings.Contains(strings.ToLower(v), strings.ToLower(name)+"=") {
					return true
				}
			}
		}
	}
	return false
}

// hasParam says q has the parameter, in any case: PostgreSQL's setting
// names are.
func hasParam(q url.Values, name string) bool {
	for k := range q {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}
