package mysql

import "testing"

// A table added to a changefeed keeps where the binary log ended; the
// transactions the reader passes over are those at or before it: by
// GTIDs where both have them, else by file and offset on its server.
// Only on its own server does the reader forget the point once past it.
func TestWhereATableWasAddedCoversTheTransactionsBefore(t *testing.T) {
	maria := &logPoint{File: "bin.000009", Pos: 500, Server: 1, GTID: "0-1-40,7-2-3"}
	mysql := &logPoint{File: "bin.000009", Pos: 500, Server: 1, GTID: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-40"}
	noGTID := &logPoint{File: "bin.000009", Pos: 500, Server: 1}
	for _, c := range []struct {
		p      *logPoint
		flavor string
		server uint32
		file   string
		pos    uint32
		gtid   string
		want   bool
	}{
		{nil, "mariadb", 1, "bin.000001", 4, "0-1-1", false},
		{noGTID, "mysql", 1, "bin.000009", 500, "", true},
		{noGTID, "mysql", 1, "bin.000009", 501, "", false},
		{noGTID, "mysql", 1, "bin.000008", 90000, "", true},
		{noGTID, "mysql", 1, "bin.000010", 4, "", false},
		{noGTID, "mysql", 1, "bin.000009", 0, "", false}, // no offset: not told
		{&logPoint{File: "bin.999999", Pos: 9, Server: 1}, "mysql", 1, "bin.1000000", 4, "", false},
		{noGTID, "mysql", 2, "other.000001", 4, "", false}, // another server, no GTIDs: not told
		{maria, "mariadb", 1, "bin.000009", 400, "0-1-40", true},
		{maria, "mariadb", 1, "bin.000009", 600, "0-1-41", false},
		{maria, "mariadb", 1, "bin.000001", 4, "0-1-41", false}, // GTIDs first: a RESET MASTER renumbers files
		{maria, "mariadb", 2, "other.000001", 4, "0-1-40", true},
		{maria, "mariadb", 2, "other.000001", 4, "0-2-41", false},
		{maria, "mariadb", 2, "other.000001", 4, "7-2-3", true},
		{maria, "mariadb", 2, "other.000001", 4, "5-2-1", false}, // a domain the point has not seen
		{mysql, "mysql", 2, "other.000001", 4, "3e11fa47-71ca-11e1-9e33-c80aa9429562:40", true},
		{mysql, "mysql", 2, "other.000001", 4, "3e11fa47-71ca-11e1-9e33-c80aa9429562:41", false},
		{mysql, "mysql", 2, "other.000001", 4, "", false},
	} {
		if got := c.p.covers(c.flavor, c.server, c.file, c.pos, c.gtid); got != c.want {
			t.Errorf("%+v covers %s %d %s:%d %s = %v, want %v", c.p, c.flavor, c.server, c.file, c.pos, c.gtid, got, c.want)
		}
	}
	if !maria.passedOnItsServer(1, "bin.000010", false) || maria.passedOnItsServer(1, "bin.000010", true) ||
		maria.passedOnItsServer(2, "other.000001", false) || (*logPoint)(nil).passedOnItsServer(1, "bin.000010", false) {
		t.Error("the point is forgotten where its order does not hold")
	}
}
