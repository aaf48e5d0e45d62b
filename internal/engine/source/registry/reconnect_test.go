package registry

import (
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// A changefeed's connection changes (user, password, address, the
// driver's parameters); what it replicates does not, and trying to
// change it says how instead.
func TestReconnectChangesTheConnectionAndKeepsTheRest(t *testing.T) {
	own := func(k string) bool {
		switch k {
		case "tables", "filter", "slot", "publication", "start", "snapshot":
			return true
		}
		return false
	}
	const stored = "postgres://cdc:old@db1:5432/shop?connect_timeout=5&slot=s1&start=77&tables=public.a%2Cpublic.b"
	for _, tc := range []struct {
		name, given, want string
		changes           []string
		refused           string
	}{
		{name: "password rotated", given: "postgres://cdc:new@db1:5432/shop?connect_timeout=5",
			want: "postgres://cdc:new@db1:5432/shop?connect_timeout=5&slot=s1&start=77&tables=public.a%2Cpublic.b", changes: []string{"password: changed"}},
		{name: "the masked password keeps the stored one", given: "postgres://cdc:xxxxx@db2:6432/shop?connect_timeout=5&sslmode=require",
			want:    "postgres://cdc:old@db2:6432/shop?connect_timeout=5&slot=s1&sslmode=require&start=77&tables=public.a%2Cpublic.b",
			changes: []string{"address: db1:5432 → db2:6432", "sslmode: (none) → require"}},
		{name: "no password: the environment's; a parameter left out goes", given: "postgresql://other@db1:5432",
			want:    "postgres://other@db1:5432/shop?slot=s1&start=77&tables=public.a%2Cpublic.b",
			changes: []string{"user: cdc → other", "password: from the agents' environment (none in the URI)", "connect_timeout: 5 → (none)"}},
		{name: "the changefeed's own parameters repeated unchanged", given: "postgres://cdc:old@db1:5432/shop?connect_timeout=5&slot=s1"},
		{name: "nothing changes", given: stored[:strings.Index(stored, "?")] + "?connect_timeout=5"},
		{name: "another database", given: "postgres://cdc:new@db1:5432/other", refused: "replicates database shop, not other"},
		{name: "another source", given: "mysql://cdc:new@db1:3306/shop", refused: "is postgres://, not mysql://"},
		{name: "the tables", given: "postgres://cdc:new@db1/shop?tables=public.a", refused: "leave tables= out"},
		{name: "a parameter of the changefeed's own", given: "postgres://cdc:new@db1/shop?slot=s2", refused: "slot=s2: the changefeed's slot is fixed when it is created (s1)"},
		{name: "no server", given: "postgres:///shop", refused: "name the server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changes, err := reconnect(stored, tc.given, own)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("err %v, want one saying %q", err, tc.refused)
				}
				if strings.Contains(err.Error(), "new") && strings.Contains(err.Error(), "cdc:new") {
					t.Fatalf("the refusal shows the password: %v", err)
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
				if strings.Contains(c, "new") || strings.Contains(c, "old") {
					t.Errorf("a change line shows a password: %q", c)
				}
			}
		})
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
		"postgres://u:Secret1@h/shop?slot=s2&password=Secret1",
	} {
		f.Add(seed)
	}
	own := func(k string) bool { return k == "tables" || k == "slot" }
	f.Fuzz(func(t *testing.T, given string) {
		uri, changes, err := reconnect(stored, given, own)
		secret := ""
		if u, perr := url.Parse(given); perr == nil {
			secret, _ = u.User.Password()
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
