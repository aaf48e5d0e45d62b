package mysql

import (
	"testing"
	"unsafe"
)

// A compressed transaction's row values are copied off its payload:
// none of them points into the buffer they were decoded from (a kept
// row would keep all of it), and each keeps its value.
func TestACompressedTransactionsRowsOwnTheirValues(t *testing.T) {
	payload := []byte("note-onebytes")
	text := unsafe.String(&payload[0], 8) // as go-mysql decodes a VARCHAR
	raw := payload[8:13]                  // and a BLOB
	rows := [][]any{{int64(1), text, raw, nil}}
	ownValues(rows)
	inPayload := func(p unsafe.Pointer) bool {
		lo, hi := uintptr(unsafe.Pointer(&payload[0])), uintptr(unsafe.Pointer(&payload[len(payload)-1]))
		return uintptr(p) >= lo && uintptr(p) <= hi
	}
	s, b := rows[0][1].(string), rows[0][2].([]byte)
	if s != "note-one" || string(b) != "bytes" || rows[0][0] != int64(1) || rows[0][3] != nil {
		t.Fatalf("the values changed: %q", rows[0])
	}
	if inPayload(unsafe.Pointer(unsafe.StringData(s))) || inPayload(unsafe.Pointer(&b[0])) {
		t.Fatal("a value still points into the payload")
	}
}
