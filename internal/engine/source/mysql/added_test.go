package mysql

import "testing"

// A table added to a changefeed keeps where the binary log ended; the
// transactions the reader passes over are those at or before it, told
// on its server by file and offset and on another by GTIDs.
func TestWhereATableWasAddedCoversTheTransactionsBefore(t *testing.T) {
	maria := &logPoint{File: "bin.000009", Pos: 500, Server: 1, GTID: "0-1-40,7-2-3"}
	mysql := &logPoint{File: "bin.000009", Pos: 500, Server: 1, GTID: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-40"}
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
		{maria, "mariadb", 1, "bin.000009", 500, "", true},
		{maria, "mariadb", 1, "bin.000009", 501, "", false},
		{maria, "mariadb", 1, "bin.000008", 90000, "", true},
		{maria, "mariadb", 1, "bin.000010", 4, "0-1-2", false}, // its own server: the file and offset tell
		{&logPoint{File: "bin.999999", Pos: 9, Server: 1}, "mariadb", 1, "bin.1000000", 4, "", false},
		{maria, "mariadb", 2, "other.000001", 4, "0-1-40", true}, // another server: the GTIDs tell
		{maria, "mariadb", 2, "other.000001", 4, "0-2-41", false},
		{maria, "mariadb", 2, "other.000001", 4, "7-2-3", true},
		{maria, "mariadb", 2, "other.000001", 4, "5-2-1", false}, // a domain the point has not seen
		{&logPoint{File: "bin.000009", Pos: 500, Server: 1}, "mariadb", 2, "other.000001", 4, "0-1-1", false},
		{mysql, "mysql", 2, "other.000001", 4, "3e11fa47-71ca-11e1-9e33-c80aa9429562:40", true},
		{mysql, "mysql", 2, "other.000001", 4, "3e11fa47-71ca-11e1-9e33-c80aa9429562:41", false},
		{mysql, "mysql", 2, "other.000001", 4, "", false},
	} {
		if got := c.p.covers(c.flavor, c.server, c.file, c.pos, c.gtid); got != c.want {
			t.Errorf("%+v covers %s %d %s:%d %s = %v, want %v", c.p, c.flavor, c.server, c.file, c.pos, c.gtid, got, c.want)
		}
	}
}
