package mysql

// MariaDB's own types of sixteen bytes, INET6 (10.5) and UUID (10.7): the
// binary log carries their bytes, as a BINARY(16), and the server shows
// them as text ('::1', '123e4567-e89b-12d3-a456-426655440000'), which
// the snapshot reads and the sink gets. Read as BINARY(16), the stream's
// rows carried the raw bytes under a made-up schema change, or held the
// table (TestMariaDBsINET6AndUUIDArriveAsTheServerShowsThem).

import (
	"encoding/hex"
	"net/netip"
	"strconv"
	"strings"
)

// fixedBinary says a catalog type is one of them.
func fixedBinary(base string) bool { return base == "inet6" || base == "uuid" }

// fixedText writes an INET6 or UUID value's bytes (the log leaves off
// trailing zero bytes) as the server shows it.
func fixedText(base, s string) string {
	if len(s) < 16 {
		s += strings.Repeat("\x00", 16-len(s))
	}
	var b [16]byte
	copy(b[:], s)
	if base == "uuid" {
		h := hex.EncodeToString(b[:])
		return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	}
	a := netip.AddrFrom16(b)
	if v4 := b[:12]; a.Is4In6() {
		return "::ffff:" + a.Unmap().String()
	} else if allZero(v4) && (b[12] != 0 || b[13] != 0) {
		// IPv4-compatible (::a.b.c.d), as inet_ntop writes it; :: and
		// ::1 (and ::x.y with the first two bytes zero) stay hex.
		return "::" + netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}).String()
	}
	return inet6Text(b)
}

// inet6Text writes an address's eight groups as MariaDB does: in hex
// without leading zeros, its longest run of zero groups (the first of
// equal ones) as "::", also a run of one group, which RFC 5952 and Go's
// netip leave as "0" ("1::2:3:4:5:6:7", not "1:0:2:3:4:5:6:7").
func inet6Text(b [16]byte) string {
	var g [8]uint16
	for i := range g {
		g[i] = uint16(b[2*i])<<8 | uint16(b[2*i+1])
	}
	start, n := -1, 0
	for i := 0; i < 8; {
		if g[i] != 0 {
			i++
			continue
		}
		j := i
		for j < 8 && g[j] == 0 {
			j++
		}
		if j-i > n {
			start, n = i, j-i
		}
		i = j
	}
	var out strings.Builder
	for i := 0; i < 8; i++ {
		if i == start {
			out.WriteString("::")
			i += n - 1
			continue
		}
		if i > 0 && i != start+n {
			out.WriteByte(':')
		}
		out.WriteString(strconv.FormatUint(uint64(g[i]), 16))
	}
	return out.String()
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
