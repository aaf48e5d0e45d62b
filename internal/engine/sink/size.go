package sink

import (
	"fmt"
	"strconv"
	"strings"
)

// sizeUnits are the suffixes ParseBytes takes: binary units, as the
// spools and buffers they size are memory.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}}

// ParseBytes parses a size parameter of a sink URI, a number of bytes
// written plainly (67108864) or with a binary unit (64MiB), between lo and
// hi. Its errors say how to write one.
func ParseBytes(v string, lo, hi int64) (int64, error) {
	num, mult := v, int64(1)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n < 0 || (mult > 1 && n > hi/mult+1) {
		return 0, fmt.Errorf("not a number of bytes; write it like %d or %s", lo*16, Bytes(lo*16))
	}
	n *= mult
	if n < lo || n > hi {
		return 0, fmt.Errorf("must be between %s and %s", Bytes(lo), Bytes(hi))
	}
	return n, nil
}

// Bytes writes n the way ParseBytes reads it: in the largest binary unit
// that divides it.
func Bytes(n int64) string {
	for i := 3; i >= 0; i-- {
		u := sizeUnits[i]
		if n >= u.mult && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// ParseBool parses a sink URI's on/off parameter (true or false, and the
// other spellings strconv.ParseBool takes), saying what to write when it
// does not.
func ParseBool(v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("use true or false (the default)")
	}
	return b, nil
}
