package sink

import (
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for v, want := range map[string]int64{"65536": 65536, "64KiB": 64 << 10, "64MiB": 64 << 20, "2GiB": 2 << 30, "1048576B": 1 << 20} {
		got, err := ParseBytes(v, 1024, 1<<40)
		if err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
	for v, hint := range map[string]string{
		"64MB": "write it like 16384 or 16KiB", "-1": "write it like", "": "write it like", "9999999999TiB": "write it like",
		"512": "must be between 1KiB and 1TiB", "2TiB": "must be between 1KiB and 1TiB",
	} {
		if _, err := ParseBytes(v, 1024, 1<<40); err == nil || !strings.Contains(err.Error(), hint) {
			t.Errorf("ParseBytes(%q): %v; want an error saying %q", v, err, hint)
		}
	}
}

func FuzzParseBytes(f *testing.F) {
	for _, v := range []string{"1", "64KiB", "9223372036854775807", "8388608TiB", "B", " 5 MiB"} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n, err := ParseBytes(v, 1024, 1<<50)
		if err == nil && (n < 1024 || n > 1<<50) {
			t.Fatalf("ParseBytes(%q) = %d: outside its bounds", v, n)
		}
	})
}
