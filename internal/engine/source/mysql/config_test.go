package mysql_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
)

func TestASourceURIIsReadAndWrittenBack(t *testing.T) {
	t.Setenv("MYSQL_PWD", "")
	c, err := mysql.ParseURI("mysql://cdc:p%40ss@db.example:3307/shop?tables=orders,archive.items,shop.%22Notes%22&server-id=42")
	if err != nil {
		t.Fatal(err)
	}
	want := mysql.Config{User: "cdc", Password: "p@ss", Host: "db.example", Port: 3307, Database: "shop",
		Tables: []string{"shop.orders", "archive.items", `shop."Notes"`}, ServerID: 42, Snapshot: "initial", AutoRemedy: true}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("parsed %+v\nwant %+v", c, want)
	}
	if kept, err := mysql.ParseURI(c.URI() + "&auto-remedy=false"); err != nil || kept.AutoRemedy || !strings.Contains(kept.URI(), "auto-remedy=false") {
		t.Fatalf("auto-remedy=false read as %+v, written back as %s (%v)", kept, kept.URI(), err)
	}
	if kept, err := mysql.ParseURI(c.URI() + "&snapshot-rate=2500"); err != nil || kept.SnapshotRate != 2500 || !strings.Contains(kept.URI(), "snapshot-rate=2500") {
		t.Fatalf("snapshot-rate=2500 read as %+v, written back as %s (%v)", kept, kept.URI(), err)
	}
	again, err := mysql.ParseURI(c.URI())
	if err != nil || !reflect.DeepEqual(again, c) {
		t.Fatalf("written back as %s, read again as %+v (%v)", c.URI(), again, err)
	}
	if r := mysql.Redact(c.URI()); strings.Contains(r, "p@ss") || strings.Contains(r, "p%40ss") || !strings.Contains(r, "xxxxx") {
		t.Fatalf("redacted: %s", r)
	}
}

func TestAPasswordComesFromMYSQL_PWD(t *testing.T) {
	t.Setenv("MYSQL_PWD", "from-env")
	c, err := mysql.ParseURI("mysql://cdc@127.0.0.1/shop?tables=orders")
	if err != nil || c.Password != "from-env" || c.Port != 3306 {
		t.Fatalf("%+v %v", c, err)
	}
}

func TestBadSourceURIsSayWhatToWrite(t *testing.T) {
	for raw, want := range map[string]string{
		"mysql:///shop?tables=orders":                            "name the server",
		"mysql://cdc@host/?tables=orders":                        "name one database in the path",
		"mysql://@host/shop?tables=orders":                       "name the user",
		"mysql://cdc@host/shop":                                  "name the tables to replicate",
		"mysql://cdc@host/shop?tables=orders,orders":             "table shop.orders is named twice",
		"mysql://cdc@host/shop?tables=orders&server-id=0":        "server-id=\"0\"",
		"mysql://cdc@host/shop?tables=orders&snapshot=sometimes": "use initial",
		"mysql://cdc@host/shop?tables=orders&auto-remedy=ok":     "auto-remedy=\"ok\": use true",
		"mysql://cdc@host/shop?tables=orders&snapshot-rate=1e3":  "snapshot-rate=\"1e3\": give the rows",
		"mysql://cdc@host/shop?tables=orders&snapshot-rate=":     "snapshot-rate=\"\": give the rows",
		"mysql://cdc@host/shop?tables=orders&slot=x":             "unknown parameter \"slot\"",
		"mysql://cdc@host:99999/shop?tables=orders":              "is not a port number",
		"postgres://cdc@host/shop?tables=orders":                 "scheme must be mysql://",
		"mysql://cdc:secret@host/shop?tables=%22a/b%22":          "cannot be a storage sink's directory",
		"mysql://cdc@host/shop?tables=!audit":                    "exclude but include nothing",
		"mysql://cdc@host/shop?tables=a.b.*":                     "write database.table with * and ?",
		"mysql://cdc@host/shop?tables=shop.[*":                   "syntax error in pattern",
		"mysql://cdc@host/shop?tables=shop.*,shop.*":             "given twice",
	} {
		_, err := mysql.ParseURI(raw)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want %q", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error shows the password: %v", raw, err)
		}
	}
}

func FuzzParseURI(f *testing.F) {
	f.Add("mysql://cdc:pw@127.0.0.1:3306/shop?tables=orders,shop.items&server-id=7")
	f.Add("mariadb://u@h/d?tables=%22A%22&snapshot=never&start=1")
	f.Add("mysql://u@h/shop?tables=shop.*,!shop.audit,arch?ve.*")
	f.Add("mysql://u@h/shop?tables=shop.orders&filter=shop.*")
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := mysql.ParseURI(raw)
		if err != nil {
			return
		}
		again, err := mysql.ParseURI(c.URI())
		if err != nil {
			t.Fatalf("%q parsed, but its written form %q does not: %v", raw, c.URI(), err)
		}
		if !reflect.DeepEqual(again.Tables, c.Tables) || !reflect.DeepEqual(again.Filter, c.Filter) || again.Database != c.Database || again.Addr() != c.Addr() {
			t.Fatalf("%q: read back as %+v, want %+v", raw, again, c)
		}
	})
}

// Table rules: patterns in tables= are kept as rules (filter= in the
// stored URI, beside the tables they matched), each in a database.
func TestTableRulesAreReadAndWrittenBack(t *testing.T) {
	c, err := mysql.ParseURI("mysql://cdc@host/shop?tables=*,!audit,arch?ve.*")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"shop.*", "!shop.audit", "arch?ve.*"}; !reflect.DeepEqual(c.Filter, want) || len(c.Tables) != 0 {
		t.Fatalf("rules %v, tables %v; want %v and none", c.Filter, c.Tables, want)
	}
	c.Tables = []string{"shop.orders", "archive.items"}
	again, err := mysql.ParseURI(c.URI())
	if err != nil || !reflect.DeepEqual(again.Filter, c.Filter) || !reflect.DeepEqual(again.Tables, c.Tables) {
		t.Fatalf("written back as %s, read again as %+v (%v)", c.URI(), again, err)
	}
}

// Two changefeeds of one server claim the same server id when one's URI
// gives the other's (pasted from its stored URI); derived ids differ by
// name; another server's ids are its own.
func TestServerIDsAreClaimedPerServer(t *testing.T) {
	a := mysql.Claims("mysql://cdc@db.example:3306/shop?tables=t", "a")
	stored := mysql.Claims("mysql://cdc@DB.example/shop?tables=t&server-id=77", "a")
	copied := mysql.Claims("mysql://cdc@db.example:3306/shop?tables=t&server-id=77", "b")
	other := mysql.Claims("mysql://cdc@db2.example:3306/shop?tables=t&server-id=77", "c")
	if len(a) != 1 || len(stored) != 1 || stored[0] != copied[0] || stored[0] == other[0] || a[0] == mysql.Claims("mysql://cdc@db.example/shop?tables=t", "b")[0] {
		t.Fatalf("claims: a %q, stored %q, copied %q, other %q", a, stored, copied, other)
	}
}
