package mysql

import (
	"math/rand/v2"
	"testing"
	"time"
)

// A DATETIME or TIMESTAMP the binary log carried as a time is written as
// the server's text protocol writes it: in UTC (the reader's session
// time zone), with exactly the column's digits of fraction, zeros too,
// and four digits of year also before 1000. (TestEveryTypeArrivesAsThe
// ServerShowsIt proves the same against MariaDB.)
func TestADatetimeIsWrittenWithItsColumnsDigits(t *testing.T) {
	east := time.FixedZone("east", 5*3600+30*60)
	for _, c := range []struct {
		typ  string
		at   time.Time
		want string
	}{
		{"datetime", time.Date(2024, 2, 29, 23, 59, 59, 0, time.UTC), "2024-02-29 23:59:59"},
		{"datetime(6)", time.Date(2024, 2, 29, 23, 59, 59, 999999000, time.UTC), "2024-02-29 23:59:59.999999"},
		{"datetime(3)", time.Date(2024, 2, 29, 23, 59, 59, 500000000, time.UTC), "2024-02-29 23:59:59.500"},
		{"datetime(1)", time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), "9999-12-31 00:00:00.0"},
		{"datetime(6)", time.Date(999, 1, 2, 3, 4, 5, 6000, time.UTC), "0999-01-02 03:04:05.000006"},
		{"timestamp(6)", time.Date(1970, 1, 1, 5, 30, 1, 1000, east), "1970-01-01 00:00:01.000001"},
		{"timestamp", time.Unix(2147483647, 0), "2038-01-19 03:14:07"},
	} {
		v, err := parseColumn(c.typ).text(c.at)
		if err != nil {
			t.Fatal(err)
		}
		if v.Text != c.want {
			t.Errorf("%s %v: %q, want %q", c.typ, c.at, v.Text, c.want)
		}
	}
	// Written digit by digit: the same as time's layout writes it, the
	// fraction cut to the column's digits.
	const layout = "2006-01-02 15:04:05.000000"
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		at := time.Date(1+r.IntN(9999), time.Month(1+r.IntN(12)), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1e9), time.UTC)
		width := r.IntN(7)
		want := at.Format(layout[:19])
		if width > 0 {
			want = at.Format(layout[:20+width])
		}
		if got := (column{width: width}).datetime(at); got != want {
			t.Fatalf("%v with %d digits: %q, want %q", at, width, got, want)
		}
	}
}
