package storage

import "testing"

// FuzzParseURI: a sink URI is operator input; parsing never panics, and
// what it accepts can run (positive sizes, a spool that holds a file).
func FuzzParseURI(f *testing.F) {
	for _, s := range []string{
		"file:///tmp/x?protocol=csv&file-size=1048576&flush-interval=5s",
		"s3://bucket/prefix?region=us-east-1&max-flush-delay=0s&state-ttl=1h",
		"file:///d?spool-max-bytes=67108864&write-timeout=1m&schema=gen",
		"file:///d?spool=disk&spool-dir=/var/spool/cdc&max-active-tables=5000&max-buffered-bytes=1048576",
		"file:///d?date-separator=day", "gs://b/p?date-separator=month",
		"mem://", "file:///d?file-size=-1", "gs://b?flush-interval=soon", "file:///d?%zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := ParseURI(raw)
		if err != nil {
			return
		}
		if c.FileSize <= 0 || c.SpoolMaxBytes <= 0 || c.FlushInterval <= 0 || c.fileTarget() <= 0 ||
			c.MaxActiveTables < 1 || c.bufferedCap() <= 0 || (c.Spool != SpoolDisk && c.SpoolDir != "") {
			t.Fatalf("accepted %q as %+v", raw, c)
		}
	})
}
