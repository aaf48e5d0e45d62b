package postgres

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver"
)

func TestParseURI(t *testing.T) {
	for _, tc := range []struct {
		uri, err string
		tables   []string
	}{
		{uri: "postgres://u:secret@127.0.0.1:5432/shop?tables=orders,crm.customers&sslmode=disable", tables: []string{"public.orders", "crm.customers"}},
		{uri: "postgresql://u@h/shop?tables=public.orders&slot=s1&publication=p1", tables: []string{"public.orders"}},
		{uri: "postgres://u@h/shop?tables=", err: "name the tables"},
		{uri: "postgres://u@h/?tables=t", err: "name the database"},
		{uri: "postgres:///shop?tables=t", err: "name the server"},
		{uri: "postgres://u@h/shop?tables=Orders", err: `write "Orders" for the name as it is, or orders`},
		{uri: `postgres://u@h/shop?tables="Orders",%22My%20Schema%22."a,b"`, tables: []string{`public."Orders"`, `"My Schema"."a,b"`}},
		{uri: `postgres://u@h/shop?tables=public."a/b"`, err: "cannot be a storage sink's directory"},
		{uri: `postgres://u@h/shop?tables=public.*,!public."Audit"`},
		{uri: "postgres://u@h/shop?tables=t,public.t", err: "named twice"},
		{uri: "postgres://u@h/shop?tables=t&slot=Bad-Name", err: "slot="},
		{uri: "mysql://u@h/shop?tables=t", err: "scheme must be postgres://"},
		{uri: "postgres://u@h/shop?tables=t&auto-remedy=ok", err: `auto-remedy="ok": use true`},
		{uri: "postgres://u@h/shop?tables=t&auto-remedy=false", tables: []string{"public.t"}},
		{uri: "postgres://u@h/shop?tables=t&catalog-interval=2s", tables: []string{"public.t"}},
		{uri: "postgres://u@h/shop?tables=t&catalog-interval=10", err: `catalog-interval="10": give how often`},
		{uri: "postgres://u@h/shop?tables=t&catalog-interval=10ms", err: "from 100ms to 1h"},
		{uri: "postgres://u@h/shop?tables=t&snapshot-rate=5000", tables: []string{"public.t"}},
		{uri: "postgres://u@h/shop?tables=t&snapshot-rate=-5", err: `snapshot-rate="-5": give the rows the initial snapshot reads a second`},
		{uri: "postgres://u@h/shop?tables=t&snapshot-rate=", err: `snapshot-rate="": give the rows`},
	} {
		c, err := ParseURI(tc.uri)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.uri, err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(c.Tables, "|") != strings.Join(tc.tables, "|") {
			t.Errorf("%s: %+v %v", tc.uri, c, err)
			continue
		}
		if strings.Contains(c.ConnString, "tables=") || strings.Contains(c.ConnString, "slot=") || strings.Contains(c.ConnString, "snapshot-rate") {
			t.Errorf("%s: our parameters reach the driver: %s", tc.uri, c.ConnString)
		}
		again, err := ParseURI(c.URI())
		if err != nil || again.ConnString != c.ConnString || strings.Join(again.Tables, ",") != strings.Join(c.Tables, ",") || again.Slot != c.Slot ||
			again.AutoRemedy != c.AutoRemedy || c.AutoRemedy == strings.Contains(tc.uri, "auto-remedy=false") ||
			again.CatalogInterval != c.CatalogInterval || (c.CatalogInterval == 2*time.Second) != strings.Contains(tc.uri, "catalog-interval=2s") {
			t.Errorf("%s: round trip %+v %v", tc.uri, again, err)
		}
	}
	for _, uri := range []string{"postgres://u:secret@h/db?tables=t", "postgres://u@h/db?tables=t&password=secret&sslpassword=secret"} {
		if r := Redact(uri); strings.Contains(r, "secret") || !strings.Contains(r, "tables=t") {
			t.Errorf("Redact(%s) = %s", uri, r)
		}
	}
	if _, err := ParseURI("postgres://u:se%zzcret@h/db?tables=t"); err == nil || strings.Contains(err.Error(), "se%zzcret") {
		t.Errorf("a bad URI's error echoes the password: %v", err)
	}
}

func TestPrepareRefusesWithTheReasonAndAFix(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE keyed (id int PRIMARY KEY); CREATE TABLE keyless (v text);
		CREATE ROLE reader LOGIN; GRANT SELECT ON keyed TO reader;
		CREATE TABLE m (id int8, day date, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
		CREATE TABLE m_2024 PARTITION OF m FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
		CREATE PUBLICATION children FOR TABLE m;
		CREATE TABLE byemail (id int8 PRIMARY KEY, email text NOT NULL UNIQUE); ALTER TABLE byemail REPLICA IDENTITY USING INDEX byemail_email_key;
		CREATE TABLE nothing (id int8 PRIMARY KEY); ALTER TABLE nothing REPLICA IDENTITY NOTHING;
		CREATE TABLE deferred (id int8 PRIMARY KEY DEFERRABLE);
		CREATE TABLE deferredfull (id int8 PRIMARY KEY DEFERRABLE); ALTER TABLE deferredfull REPLICA IDENTITY FULL;
		CREATE TABLE samecols (id int8 PRIMARY KEY); CREATE UNIQUE INDEX samecols_id ON samecols (id); ALTER TABLE samecols REPLICA IDENTITY USING INDEX samecols_id;
		CREATE TABLE wide (id int8 PRIMARY KEY, v text);
		CREATE PUBLICATION filtered FOR TABLE wide WHERE (id > 0); CREATE PUBLICATION narrow FOR TABLE wide (id);
		CREATE PUBLICATION inserts FOR TABLE wide WITH (publish = 'insert')`)
	ctx := context.Background()
	prepare := func(uri string) error {
		cfg, err := ParseURI(uri)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Prepare(ctx, cfg.WithNames("refusals"))
		return err
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l.Addr().String()
	l.Close()
	db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	for _, tc := range []struct{ name, uri, want string }{
		{"unknown table", dsn + "&tables=nosuch", "table public.nosuch does not exist"},
		{"no primary key", dsn + "&tables=keyless", "has no primary key: add one (ALTER TABLE public.keyless ADD PRIMARY KEY (...)) so it can be split into key ranges, or replicate it as one partition with ALTER TABLE public.keyless REPLICA IDENTITY FULL"},
		{"unknown database", strings.Replace(dsn, "/"+db+"?", "/nosuchdb?", 1) + "&tables=keyed", "check the database name"},
		{"no replication privilege", strings.Replace(dsn, "postgres@", "reader@", 1) + "&tables=keyed", "may not replicate: grant it with ALTER ROLE reader REPLICATION"},
		{"unreachable", "postgres://postgres@" + closed + "/x?sslmode=disable&connect_timeout=3&tables=t", "cannot reach PostgreSQL at " + closed},
		{"TLS the server does not offer", strings.Replace(dsn, "sslmode=disable", "sslmode=require", 1) + "&tables=keyed", "server refused TLS connection; check the source URI's host name and its TLS settings"},
		{"a partition and its root", dsn + "&tables=m,m_2024", "table public.m_2024 is a partition of public.m, which the changefeed replicates too: its rows arrive as public.m's; leave public.m_2024 out of tables="},
		{"a root published under its children's names", dsn + "&tables=m&publication=children", "ALTER PUBLICATION children SET (publish_via_partition_root = true)"},
		{"an identity index of other columns", dsn + "&tables=byemail", "table public.byemail's replica identity is an index of (email), not its primary key (id): its DELETEs carry only that index's columns"},
		{"no replica identity", dsn + "&tables=nothing", "table public.nothing has REPLICA IDENTITY NOTHING"},
		{"a deferrable key", dsn + "&tables=deferred", "table public.deferred's primary key is DEFERRABLE, which PostgreSQL does not take as a replica identity"},
		{"a publication of some rows", dsn + "&tables=wide&publication=filtered", "publication filtered publishes only some of table public.wide's rows (WHERE)"},
		{"a publication of some columns", dsn + "&tables=wide&publication=narrow", "publication narrow publishes only some of table public.wide's columns (a column list)"},
		{"a publication of inserts only", dsn + "&tables=wide&publication=inserts", "publication inserts does not publish every change (insert true, update false, delete false, truncate false)"},
	} {
		err := prepare(tc.uri)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		// Only a server that could not be dialled is worth a retry as it
		// is (503); the rest need the request or the server changed.
		if retry := tc.name == "unreachable"; errors.Is(err, model.ErrUnreachable) != retry {
			t.Errorf("%s: marked unreachable %v, want %v: %v", tc.name, !retry, retry, err)
		}
	}
	// Nothing was created by the refusals.
	out, err := srv.Psql(ctx, db, "SELECT count(*) FROM pg_publication WHERE pubname NOT IN ('children', 'filtered', 'narrow', 'inserts'); SELECT count(*) FROM pg_replication_slots WHERE database = current_database()")
	if err != nil || strings.Fields(out)[0] != "0" || strings.Fields(out)[1] != "0" {
		t.Fatalf("refusals left publications/slots: %q %v", out, err)
	}

	// A deferrable key with REPLICA IDENTITY FULL, and an identity index
	// of the key's own columns, serve.
	if err := prepare(dsn + "&tables=deferredfull,samecols"); err != nil {
		t.Fatalf("a deferrable key under FULL, an identity index of the key's columns: %v", err)
	}
	if err := Remove(ctx, func() Config { c, _ := ParseURI(dsn + "&tables=deferredfull,samecols"); return c.WithNames("refusals") }()); err != nil {
		t.Fatal(err)
	}
	// A slot another consumer reads is refused, naming it.
	st, cfg, _ := open(t, dsn+"&tables=keyed")
	_ = st
	_, err = Prepare(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "is in use by another consumer") {
		t.Fatalf("a slot in use: %v", err)
	}
	// Remove drops what Prepare made.
	_ = st.Close()
	if err := Remove(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	out, _ = srv.Psql(ctx, db, "SELECT count(*) FROM pg_publication WHERE pubname NOT IN ('children', 'filtered', 'narrow', 'inserts'); SELECT count(*) FROM pg_replication_slots WHERE database = current_database()")
	if f := strings.Fields(out); f[0] != "0" || f[1] != "0" {
		t.Fatalf("after Remove: %q", out)
	}
}

func TestPrepareRefusesWithoutLogicalWALOrWithAWrongPassword(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "cdcctl-pg-replica-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	srv, err := pgserver.Start(ctx, filepath.Join(dir, "data"), 0, "wal_level=replica", "password_encryption=scram-sha-256")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if _, err := srv.Psql(ctx, "postgres", "CREATE TABLE t (id int PRIMARY KEY); CREATE ROLE pw LOGIN PASSWORD 'right'"); err != nil {
		t.Fatal(err)
	}
	// Password logins for pw only; everything else stays trusted.
	hba := filepath.Join(srv.Dir, "pg_hba.conf")
	old, _ := os.ReadFile(hba)
	if err := os.WriteFile(hba, append([]byte("host all pw 127.0.0.1/32 scram-sha-256\n"), old...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Psql(ctx, "postgres", "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	try := func(uri string) error {
		cfg, err := ParseURI(uri)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Prepare(ctx, cfg.WithNames("x"))
		return err
	}
	base := srv.DSN("postgres") + "&tables=t"
	if err := try(base); err == nil || !strings.Contains(err.Error(), "set it in postgresql.conf") || !strings.Contains(err.Error(), "restart PostgreSQL") {
		t.Errorf("wal_level=replica: %v", err)
	}
	err = try(strings.Replace(base, "postgres@", "pw:wrong@", 1))
	if err == nil || !strings.Contains(err.Error(), "refused the login") || strings.Contains(err.Error(), "wrong") {
		t.Errorf("a wrong password: %v (it must say so without echoing the password)", err)
	}
}

// A new changefeed's tables are cut at the quantiles of their keys, in
// the keys' natural order; an empty table is not cut.
func TestBoundariesAreKeyQuantiles(t *testing.T) {
	t.Parallel()
	_, dsn := newDB(t, `CREATE TABLE n (id int8 PRIMARY KEY); INSERT INTO n SELECT g FROM generate_series(1, 1000) g;
		CREATE TABLE c (region text, id int4, PRIMARY KEY (region, id)); INSERT INTO c SELECT r, g FROM unnest(ARRAY['ap','eu','us']) r, generate_series(1, 4) g;
		CREATE TABLE e (id int4 PRIMARY KEY);
		CREATE TABLE m (id int8, day date, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
		CREATE TABLE m_2024 PARTITION OF m FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
		CREATE TABLE m_2025 PARTITION OF m FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
		INSERT INTO m SELECT g, date '2024-01-01' + g % 700 FROM generate_series(1, 3000) g;
		ANALYZE m_2024, m_2025`)
	ctx := context.Background()
	uri, _, err := Pin(ctx, dsn+"&tables=n,c,e,m", "cuts", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	src, err := Open(uri, source.Env{Changefeed: "cuts"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		table string
		n     int
		want  string
	}{
		{"public.n", 4, "251 501 751"},
		{"public.c", 3, "eu,1 us,1"},
		{"public.e", 4, ""},
		{"public.n", 1, ""},
		// A partitioned root: its children's keys.
		{"public.m", 3, "1001,2024-10-28 2001,2025-08-24"},
	} {
		bounds, err := src.Boundaries(ctx, tc.table, tc.n)
		if err != nil {
			t.Fatal(err)
		}
		types, _, err := src.TableKey(ctx, tc.table)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, b := range bounds {
			got = append(got, model.DecodeKey(types, b))
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%s in %d: cut at %v, want %q", tc.table, tc.n, got, tc.want)
		}
	}
	// The estimate that decides whether a table is sampled counts a
	// partitioned root's children (the root itself holds no rows).
	cat, err := openCatalog(ctx, src.cfg.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	if n, err := rowEstimate(ctx, cat, "public.m"); err != nil || n < 2900 || n > 3100 {
		t.Fatalf("public.m is estimated at %v rows (%v), want about 3000", n, err)
	}
}

// Table rules: globs over schema.table, ! to exclude, the order of no
// account; a stored URI keeps the rules and what they matched.
func TestTableRules(t *testing.T) {
	rules, err := ParseFilter([]string{"public.*", "sales.order_?", "!audit"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"public.*", "sales.order_?", "!public.audit"}; !slices.Equal(rules, want) {
		t.Fatalf("rules %v, want %v", rules, want)
	}
	for table, want := range map[string]bool{
		"public.orders": true, "public.audit": false, "sales.order_1": true, "sales.order_12": false, "sales.orders": false, "other.orders": false,
	} {
		if got := matches(rules, table); got != want {
			t.Errorf("%s: matched %v, want %v", table, got, want)
		}
	}
	// Quoted parts are names as they are; unquoted ones are lowercase.
	quoted, err := ParseFilter([]string{`"Sales".*`, `!public."Audit Log"`, `"public"."orders"`})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{`"Sales".*`, `!public."Audit Log"`, "public.orders"}; !slices.Equal(quoted, want) {
		t.Fatalf("quoted rules %v, want %v", quoted, want)
	}
	for table, want := range map[string]bool{
		`"Sales"."Q1"`: true, "sales.q1": false, `public."Audit Log"`: false, "public.orders": true,
	} {
		if got := matches(quoted, table); got != want {
			t.Errorf("%s: matched %v, want %v", table, got, want)
		}
	}
	for _, bad := range [][]string{{"!public.audit"}, {"Public.*"}, {"public.[a"}, {"a.b.c"}, {"public.*", "public.*"}, {`public."unterminated`}} {
		if _, err := ParseFilter(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if all, err := ParseURI("postgres://u@h:5432/db"); err != nil || !slices.Equal(all.Filter, []string{"*.*"}) {
		t.Fatalf("no tables named: filter %v, %v; want every table (*.*)", all.Filter, err)
	}
	cfg, err := ParseURI("postgres://u@h:5432/db?tables=public.*,!public.audit")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Tables) != 0 || !slices.Equal(cfg.Filter, []string{"public.*", "!public.audit"}) {
		t.Fatalf("parsed: tables %v, filter %v", cfg.Tables, cfg.Filter)
	}
	cfg.Tables = []string{"public.a", "public.b"}
	again, err := ParseURI(cfg.URI())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.Tables, cfg.Tables) || !slices.Equal(again.Filter, cfg.Filter) {
		t.Fatalf("round trip: tables %v, filter %v", again.Tables, again.Filter)
	}
}

// catalog-interval= is how often the opened source looks at the
// catalog; without it, every dropCheckEvery.
func TestTheCatalogIntervalIsTheSourcesLook(t *testing.T) {
	for uri, want := range map[string]time.Duration{
		"postgres://u@h/db?tables=t&slot=s&publication=p&start=1":                         dropCheckEvery,
		"postgres://u@h/db?tables=t&slot=s&publication=p&start=1&catalog-interval=1500ms": 1500 * time.Millisecond,
	} {
		src, err := Open(uri, source.Env{Changefeed: "c"})
		if err != nil {
			t.Fatalf("%s: %v", uri, err)
		}
		if src.dropEvery != want {
			t.Errorf("%s: looks every %v, want %v", uri, src.dropEvery, want)
		}
		_ = src.Close()
	}
}

// A new changefeed's sessions write a timestamptz in UTC unless the URI
// names a zone; one stored before the zone was fixed (a start, no zone)
// keeps the server's. The other session settings are added unless the
// URI gives them itself, and the stored URI carries only the zone.
func TestSessionSettingsOfASourceURI(t *testing.T) {
	for _, tc := range []struct {
		uri, zone, err string
		conn, notConn  []string
	}{
		{uri: "postgres://u@h/db?tables=t", zone: "UTC", conn: []string{"timezone=UTC", "DateStyle=ISO", "extra_float_digits=3", "bytea_output=hex", "IntervalStyle=postgres", "client_encoding=UTF8", "standard_conforming_strings=on"}},
		{uri: "postgres://u@h/db?tables=t&timezone=Europe/Berlin", zone: "Europe/Berlin", conn: []string{"timezone=Europe%2FBerlin"}},
		{uri: "postgres://u@h/db?tables=t&TimeZone=Asia/Tokyo", zone: "Asia/Tokyo", conn: []string{"timezone=Asia%2FTokyo"}, notConn: []string{"TimeZone"}},
		{uri: "postgres://u@h/db?tables=t&timezone=Etc/GMT%2B5", zone: "Etc/GMT+5", conn: []string{"timezone=Etc%2FGMT%2B5"}},
		// Stored before the settings were fixed: only those it cannot read
		// without; its values' texts stay the server's.
		{uri: "postgres://u@h/db?tables=t&start=42", zone: "", notConn: []string{"TimeZone", "timezone", "DateStyle", "extra_float_digits"}, conn: []string{"client_encoding=UTF8", "standard_conforming_strings=on"}},
		{uri: "postgres://u@h/db?tables=t&datestyle=German&EXTRA_FLOAT_DIGITS=0", zone: "UTC", conn: []string{"datestyle=German", "EXTRA_FLOAT_DIGITS=0"}, notConn: []string{"DateStyle=ISO", "extra_float_digits=3"}},
		{uri: "postgres://u@h/db?tables=t&timezone=UTC&TimeZone=UTC", err: "timezone given 2 times"},
		{uri: "postgres://u@h/db?tables=t&timezone=", err: "timezone is empty"},
		{uri: "postgres://u@h/db?tables=t&timezone=Etc/GMT+5", err: "write a zone's + as %2B"},
	} {
		c, err := ParseURI(tc.uri)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.uri, err, tc.err)
			}
			continue
		}
		if err != nil || c.TimeZone != tc.zone {
			t.Errorf("%s: zone %q %v, want %q", tc.uri, c.TimeZone, err, tc.zone)
			continue
		}
		for _, p := range tc.conn {
			if !strings.Contains(c.ConnString, p) {
				t.Errorf("%s: the driver's %s lacks %s", tc.uri, c.ConnString, p)
			}
		}
		for _, p := range tc.notConn {
			if strings.Contains(c.ConnString, p) {
				t.Errorf("%s: the driver's %s has %s", tc.uri, c.ConnString, p)
			}
		}
		stored := c.URI()
		if strings.Contains(stored, "bytea_output") || strings.Contains(stored, "client_encoding") || (tc.zone != "") != strings.Contains(stored, "timezone=") {
			t.Errorf("%s: stored as %s", tc.uri, stored)
		}
		again, err := ParseURI(stored)
		if err != nil || again.ConnString != c.ConnString || again.TimeZone != c.TimeZone || again.URI() != stored {
			t.Errorf("%s: round trip %+v %v", tc.uri, again, err)
		}
	}
}

// The zone the URI fixes is the only one that reaches the server, though
// the agent's environment sets PGTZ (which pgx reads as a parameter of
// its own): two would reach it in no fixed order.
func TestTheURIsZoneOverridesPGTZ(t *testing.T) {
	t.Setenv("PGTZ", "Asia/Kolkata")
	c, err := ParseURI("postgres://u@h/db?tables=t")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := pgconn.ParseConfig(c.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	var zones []string
	for k, v := range pc.RuntimeParams {
		if strings.EqualFold(k, "timezone") {
			zones = append(zones, k+"="+v)
		}
	}
	if len(zones) != 1 || zones[0] != "timezone=UTC" {
		t.Fatalf("the session's zones: %v", zones)
	}
}
