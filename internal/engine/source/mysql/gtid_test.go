package mysql

import (
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
)

// MySQL 8.4's tagged GTIDs (uuid:tag:N) in a server's executed set are
// found by the preflight, which refuses such a server: a changefeed's
// position is that set, and go-mysql cannot parse it (the stored
// position would fail the reader after its creation). Untagged sets,
// MariaDB's included, pass.
func TestATaggedGTIDSetIsFound(t *testing.T) {
	const uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	for set, want := range map[string]string{
		"":                                 "",
		uuid + ":1-5":                      "",
		uuid + ":1-5:7-9, " + uuid + ":11": "",
		"0-1-100,1-2-7":                    "",
		uuid + ":1-5:etl:1-3":              uuid + ":etl",
		uuid + ":1-5,\n" + uuid + ":_x:4":  uuid + ":_x",
	} {
		if got := gtidTag(set); got != want {
			t.Errorf("gtidTag(%q) = %q, want %q", set, got, want)
		}
	}
	if _, err := gomysql.ParseMysqlGTIDSet(uuid + ":1-5:etl:1-3"); err == nil {
		t.Errorf("go-mysql parses a tagged set now: the preflight's refusal may be lifted")
	}
}
