package registry

import (
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// A changefeed's connection changes (user, password, address, the
// driver's parameters); what it replicates does not, and trying to
// change it says how instead.
func TestReconnectChangesTheConnectionAndKeepsTheRest(t *testing.T) {
	const stored = "postgres://cdc:old@db1:5432/shop?bytea_output=escape&catalog-interval=1m30s&connect_timeout=5&slot=s1&start=77&tables=public.a%2Cpublic.b"
	const kept = "bytea_output=escape&catalog-interval=1m30s&slot=s1&start=77&tables=public.a%2Cpublic.b"
	for _, tc := range []struct {
		name, given, want string
		changes           []string
		refused           string
	}{
		{name: "password rotated", given: "postgres://cdc:new@db1:5432/shop?connect_timeout=5",
			want: "postgres://cdc:new@db1:5432/shop?connect_timeout=5&" + kept, changes: []string{"password: changed"}},
		{name: "the masked password keeps the stored one", given: "postgres://cdc:xxxxx@db2:6432/shop?connect_timeout=5&sslmode=require",
			want:    "postgres://cdc:old@db2:6432/shop?connect_timeout=5&sslmode=require&" + kept,
			changes: []string{"address: db1:5432 → db2:6432", "sslmode: (none) → require"}},
		{name: "no password: the environment's; a parameter left out goes", given: "postgresql://other@db1:5432",
			want:    "postgres://other@db1:5432/shop?" + kept,
			changes: []string{"user: cdc → other", "password: from the agents' environment (none in the URI)", "connect_timeout: 5 → (none)"}},
		{name: "the changefeed's own parameters repeated unchanged", given: "postgres://cdc:old@db1:5432/shop?connect_timeout=5&slot=s1&bytea_output=escape"},
		{name: "nothing changes: the default port, the host's case", given: "postgres://cdc:old@DB1/shop?connect_timeout=5"},
		{name: "a password parameter masked keeps the stored one", given: "postgres://cdc:old@db1:5432/shop?connect_timeout=5&sslpassword=xxxxx",
			refused: "sslpassword=xxxxx keeps the changefeed's sslpassword, and it has none"},
		{name: "a password parameter given", given: "postgres://cdc:old@db1:5432/shop?connect_timeout=5&sslpassword=k3y",
			want: "postgres://cdc:old@db1:5432/shop?connect_timeout=5&sslpassword=k3y&" + kept, changes: []string{"sslpassword (a parameter): changed"}},
		{name: "another database", given: "postgres://cdc:new@db1:5432/other", refused: "replicates database shop, not other"},
		{name: "another database by dbname=", given: "postgres://cdc:new@db1:5432/shop?dbname=other", refused: "dbname=other: the changefeed's dbname is fixed"},
		{name: "a session setting, in any case", given: "postgres://cdc:new@db1/shop?TimeZone=Europe/Berlin", refused: "TimeZone=Europe/Berlin: the changefeed's TimeZone is fixed"},
		{name: "another source", given: "mysql://cdc:new@db1:3306/shop", refused: "is postgres://, not mysql://"},
		{name: "the tables", given: "postgres://cdc:new@db1/shop?tables=public.a", refused: "leave tables= out"},
		{name: "a parameter of the changefeed's own", given: "postgres://cdc:new@db1/shop?slot=s2", refused: "slot=s2: the changefeed's slot is fixed when it is created (s1)"},
		{name: "the changefeed's own parameters repeated in another form", given: "postgres://cdc:old@db1:5432/shop?connect_timeout=5&catalog-interval=90s&auto-remedy=true&snapshot=initial"},
		{name: "a parameter of its own that the stored URI leaves at its default", given: "postgres://cdc:old@db1/shop?auto-remedy=false", refused: "auto-remedy=false: the changefeed's auto-remedy is fixed"},
		{name: "its snapshot's rate, tuned", given: "postgres://cdc:old@db1:5432/shop?connect_timeout=5&snapshot-rate=5000",
			want: "postgres://cdc:old@db1:5432/shop?connect_timeout=5&snapshot-rate=5000&" + kept, changes: []string{"snapshot-rate: (none) → 5000"}},
		{name: "its catalog interval", given: "postgres://cdc:old@db1/shop?catalog-interval=2m", refused: "catalog-interval=2m: the changefeed's catalog-interval is fixed"},
		{name: "the mask for another user", given: "postgres://other:xxxxx@db1/shop", refused: "keeps the changefeed's, which is user cdc's: give user other's password"},
		{name: "no server", given: "postgres:///shop", refused: "name the server"},
		{name: "a password cut by a slash", given: "postgres://cdc:/Secret99@db1:5432/shop", refused: "percent-encode"},
		{name: "a password cut by a slash after a letter", given: "postgres://cdc:S3cr/et99@db1/shop", refused: "percent-encode"},
		{name: "a password cut by a hash", given: "postgres://cdc:1234#5678@db1/shop", refused: "percent-encode"},
		{name: "a password cut by a question mark", given: "postgres://cdc:1234?x=5@db1/shop", refused: "percent-encode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changes, err := reconnect(stored, tc.given, postgres.Own, pgCanonical)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("err %v, want one saying %q", err, tc.refused)
				}
				for _, secret := range []string{"Secret99", "et99", "5678", "x=5", "new"} {
					if strings.Contains(tc.given, secret) && strings.Contains(err.Error(), secret) {
						t.Fatalf("the refusal shows %q: %v", secret, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				tc.want = stored
			}
			if !sameURI(got, tc.want) {
				t.Errorf("URI %s, want %s", got, tc.want)
			}
			if !reflect.DeepEqual(changes, tc.changes) {
				t.Errorf("changes %q, want %q", changes, tc.changes)
			}
			for _, c := range changes {
				if strings.Contains(c, "new") || strings.Contains(c, "old") || strings.Contains(c, "k3y") {
					t.Errorf("a change line shows a password: %q", c)
				}
			}
		})
	}
}

// The mask where the changefeed's URI has no password (the environment
// gives it, as the playground's): still none, nothing changes.
func TestReconnectWithTheMaskWhereThereIsNoPassword(t *testing.T) {
	const stored = "postgres://cdc@db1:5432/shop?slot=s1&tables=public.a"
	got, changes, err := reconnect(stored, "postgres://cdc:xxxxx@db1/shop", postgres.Own, pgCanonical)
	if err != nil || got != stored || len(changes) != 0 {
		t.Fatalf("%s, %q, %v: want the stored URI, no change", got, changes, err)
	}
	got, changes, err = reconnect(stored, "postgres://cdc:xxxxx@db2/shop", postgres.Own, pgCanonical)
	if err != nil || !sameURI(got, "postgres://cdc@db2/shop?slot=s1&tables=public.a") || !reflect.DeepEqual(changes, []string{"address: db1:5432 → db2"}) {
		t.Fatalf("%s, %q, %v: want the new address alone", got, changes, err)
	}
}

// The snapshot's rate is the one parameter of the changefeed's own that
// an update of its connection changes: left out, it stays; 0 takes the
// bound away; a value the source refuses is refused.
func TestReconnectTunesTheSnapshotRate(t *testing.T) {
	const stored = "postgres://cdc@db1:5432/shop?slot=s1&snapshot-rate=100&tables=public.a"
	for _, tc := range []struct {
		given, want string
		changes     []string
	}{
		{"postgres://cdc@db2:5432/shop", "postgres://cdc@db2:5432/shop?slot=s1&snapshot-rate=100&tables=public.a", []string{"address: db1:5432 → db2:5432"}},
		{"postgres://cdc@db1:5432/shop?snapshot-rate=2000", "postgres://cdc@db1:5432/shop?slot=s1&snapshot-rate=2000&tables=public.a", []string{"snapshot-rate: 100 → 2000"}},
		{"postgres://cdc@db1:5432/shop?snapshot-rate=0", "postgres://cdc@db1:5432/shop?slot=s1&tables=public.a", []string{"snapshot-rate: 100 → (none)"}},
	} {
		got, changes, err := Reconnect(stored, tc.given)
		if err != nil || !sameURI(got, tc.want) || !reflect.DeepEqual(changes, tc.changes) {
			t.Errorf("%s: %s, %q, %v; want %s, %q", tc.given, got, changes, err, tc.want, tc.changes)
		}
	}
	for given, want := range map[string]string{
		"snapshot-rate=fast":              `snapshot-rate="fast": give the rows`,
		"snapshot-rate=":                  `snapshot-rate="": give the rows`,
		"snapshot-rate=0&snapshot-rate=5": "give snapshot-rate= once",
	} {
		if _, _, err := Reconnect(stored, "postgres://cdc@db1:5432/shop?"+given); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", given, err, want)
		}
	}
	// As the source stores it: 0100 is 100, the stored rate.
	if got, changes, err := Reconnect(stored, "postgres://cdc@db1:5432/shop?snapshot-rate=0100"); err != nil || got != stored || len(changes) != 0 {
		t.Errorf("snapshot-rate=0100: %s, %q, %v; want the stored URI, no change", got, changes, err)
	}
}

// sameURI compares two URIs whatever the order of their parameters.
func sameURI(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	if err1 != nil || err2 != nil {
		return false
	}
	qa, qb := ua.Query(), ub.Query()
	ua.RawQuery, ub.RawQuery = "", ""
	return ua.String() == ub.String() && reflect.DeepEqual(qa, qb)
}

// FuzzReconnect: whatever URI an operator gives, reconnect keeps what the
// changefeed replicates (the path and its own parameters), and neither
// its refusal nor its change lines show the password given.
func FuzzReconnect(f *testing.F) {
	const stored = "postgres://cdc:old@db1:5432/shop?connect_timeout=5&slot=s1&tables=public.a"
	for _, seed := range []string{
		"postgres://cdc:Secret1@db2:5432/shop?sslmode=require",
		"postgres://cdc:xxxxx@db1/shop",
		"postgresql://u:Secret1@[::1]:5432/shop?slot=s1",
		"postgres://u:Secret1@h/other",
		"mysql://u:Secret1@h/shop",
		"postgres://u:Sec%2Fret1@h/shop?tables=x",
		"postgres:/u:Secret1@h/shop",
		"postgres://cdc:/Secret99@db1:5432/shop",
		"postgres://cdc:1234#5678@db1/shop",
		"postgres://cdc:S3cr/et99@db1/shop?dbname=x",
		"postgres://u:Secret1@h/shop?slot=s2&password=Secret1",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, given string) {
		uri, changes, err := reconnect(stored, given, postgres.Own, pgCanonical)
		// The password as typed: between the scheme's user and the last
		// @, whatever the parser makes of it.
		secret := ""
		if at := strings.LastIndex(given, "@"); at > 0 {
			if i := strings.Index(given, "://"); i >= 0 && i+3 < at {
				if _, p, ok := strings.Cut(given[i+3:at], ":"); ok {
					secret = p
				}
			}
		}
		shows := func(s string) bool {
			return len(secret) >= 6 && secret != "xxxxxx" && strings.Contains(s, secret) && !strings.Contains(strings.Replace(given, secret, "", 1), secret)
		}
		if err != nil {
			if shows(err.Error()) {
				t.Fatalf("the refusal %q shows the password", err)
			}
			return
		}
		for _, c := range changes {
			if shows(c) {
				t.Fatalf("the change %q shows the password", c)
			}
		}
		u, perr := url.Parse(uri)
		if perr != nil {
			t.Fatalf("the URI made does not parse: %v", perr)
		}
		if u.Path != "/shop" || u.Query().Get("slot") != "s1" || u.Query().Get("tables") != "public.a" {
			t.Fatalf("%s lost what the changefeed replicates", uri)
		}
	})
}

// pgCanonical is a PostgreSQL source URI as the source stores it.
func pgCanonical(uri string) (string, error) {
	c, err := postgres.ParseURI(uri)
	return c.URI(), err
}
