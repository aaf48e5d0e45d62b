package postgres

import "github.com/cdcctl/cdcctl/internal/engine/source"

// A key with uuid columns is routed, like any key that is not an
// integer, by the bytes of its text; a chunk selected and ordered by that
// text (`id::text COLLATE "C"`) is read by scanning and sorting the whole
// rest of the partition, for every chunk: a snapshot of such a table cost
// chunks × rows. But a uuid's text is its 16 bytes in lowercase hex at
// fixed places, so the uuid's own order (the key index's) is the order of
// its text: the chunk is read from the index, ordered by the uuids
// themselves, between bounds on the key's row in the uuids' terms
// (uuidCut, indexorder.go), with the text bounds kept as the exact
// filter. It returns the same rows as the text query, from a range scan
// of the index: one uuid (`id uuid PRIMARY KEY`), or a tenant's uuid
// before its rows' ids (`PRIMARY KEY (tenant uuid, id int8)`).

// uuidColumn says a key column is a uuid.
func uuidColumn(col source.ColumnDef) bool { return col.Type == "uuid" }

// uuidKey says a table's key has a uuid column.
func uuidKey(def *source.TableDef) bool {
	for _, k := range def.KeyNames() {
		if uuidColumn(def.Columns[def.Index(k)]) {
			return true
		}
	}
	return false
}

// uuidCut is how a bound value bounds a uuid column: a uuid's text (as
// PostgreSQL writes it) compares the same as that uuid; a value that is
// not one (a split key "8") compares with every uuid's text as the least
// uuid whose text is above it (uuidCeil) does, for no uuid's text equals
// it; none is above a value above every uuid's text.
func uuidCut(v string) cut {
	u, ok := uuidCeil(v)
	switch {
	case ok && u == v:
		return cut{exact: true}
	case ok:
		return cut{lower: u, upper: u, hasLower: true, hasUpper: true}
	}
	return cut{none: true}
}

// uuidCeil returns the least uuid whose text (lowercase hex, hyphens at
// 8, 13, 18 and 23) is at or above v in byte order; false when every
// uuid's text is below v.
func uuidCeil(v string) (string, bool) {
	const n = 36
	u := make([]byte, n)
	// i is how far u equals v; then u needs, at i, the least character
	// allowed there above v[i] (and the least of each after), or, if none,
	// the same at an earlier place.
	i := 0
	for ; i < n && i < len(v) && allowed(i, v[i]); i++ {
		u[i] = v[i]
	}
	if i == n && len(v) == n {
		return v, true
	}
	if i == len(v) && i < n {
		fillLeast(u, i) // v is a prefix of u: u > v
		return string(u), true
	}
	// Raise position j (i, then earlier) to a character above v[j].
	for j := min(i, n-1); j >= 0; j-- {
		var c byte
		if j < len(v) {
			c = v[j]
		}
		if next, ok := nextAllowed(j, c); ok {
			u[j] = next
			fillLeast(u, j+1)
			return string(u), true
		}
	}
	return "", false
}

func hyphenAt(i int) bool { return i == 8 || i == 13 || i == 18 || i == 23 }

func allowed(i int, c byte) bool {
	if hyphenAt(i) {
		return c == '-'
	}
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
}

// nextAllowed is the least character allowed at i above c.
func nextAllowed(i int, c byte) (byte, bool) {
	for _, x := range []byte("-0123456789abcdef") {
		if x > c && allowed(i, x) {
			return x, true
		}
	}
	return 0, false
}

func fillLeast(u []byte, from int) {
	for i := from; i < len(u); i++ {
		if hyphenAt(i) {
			u[i] = '-'
		} else {
			u[i] = '0'
		}
	}
}
