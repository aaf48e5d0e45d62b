package source

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// A small position stays plain JSON; a large one is kept compressed as a
// JSON string and reads back equal; a position stored before they were
// compressed reads as it did; one too large even compressed is refused
// saying what to do.
func TestPositionsAreKeptCompressedPastASize(t *testing.T) {
	type column struct {
		Name, Type string
	}
	type pos struct {
		File   string              `json:"file"`
		Tables map[string][]column `json:"tables"`
	}
	small := pos{File: "bin.000001", Tables: map[string][]column{"shop.orders": {{"id", "bigint(20)"}}}}
	b, err := EncodePosition(small)
	if err != nil || !strings.HasPrefix(string(b), `{"file":"bin.000001"`) {
		t.Fatalf("a small position: %s, %v", b, err)
	}
	large := pos{File: "bin.000002", Tables: map[string][]column{}}
	for i := range 3000 {
		var cols []column
		for j := range 10 {
			cols = append(cols, column{fmt.Sprintf("column_%d", j), "varchar(255)"})
		}
		large.Tables[fmt.Sprintf("tenant_%04d.orders", i)] = cols
	}
	plain, _ := json.Marshal(large)
	b, err = EncodePosition(large)
	if err != nil || !strings.HasPrefix(string(b), `"deflate:`) || !json.Valid(b) {
		t.Fatalf("a position of 3,000 tables (%d bytes plain): %.40s…, %v", len(plain), b, err)
	}
	if len(b)*8 > len(plain) {
		t.Errorf("compressed to %d bytes of %d", len(b), len(plain))
	}
	var back pos
	if err := DecodePosition(b, &back); err != nil || !reflect.DeepEqual(back, large) {
		t.Fatalf("read back: %v (equal: %v)", err, reflect.DeepEqual(back, large))
	}
	back = pos{}
	if err := DecodePosition(plain, &back); err != nil || !reflect.DeepEqual(back, large) {
		t.Fatalf("a position stored plain: %v", err)
	}
	// Text that does not compress (every column a random name).
	huge := pos{Tables: map[string][]column{}}
	for i := range 40000 {
		huge.Tables[fmt.Sprintf("t%d", i)] = []column{{fmt.Sprintf("%x", uint64(i)*0x9E3779B97F4A7C15), fmt.Sprintf("%x", uint64(i)*0xC2B2AE3D27D4EB4F)}}
	}
	if _, err := EncodePosition(huge); err == nil || !strings.Contains(err.Error(), "split them over several changefeeds") {
		t.Fatalf("a position too large even compressed: %v", err)
	}
	if err := DecodePosition([]byte(`"gzip:abc"`), &back); err == nil {
		t.Fatal("a position of an unknown form was read")
	}
}

// No input makes DecodePosition panic, and what EncodePosition writes it
// reads back.
func FuzzDecodePosition(f *testing.F) {
	f.Add([]byte(`{"file":"x","pos":4}`), "x")
	f.Add([]byte(`"deflate:AAAA"`), "")
	f.Fuzz(func(t *testing.T, raw []byte, s string) {
		var v any
		_ = DecodePosition(raw, &v)
		if !utf8.ValidString(s) {
			return // JSON writes it otherwise
		}
		in := map[string]string{"s": strings.Repeat(s, positionPlain/max(len(s), 1)+1)}
		b, err := EncodePosition(in)
		if err != nil {
			return // too large even compressed
		}
		var out map[string]string
		if err := DecodePosition(b, &out); err != nil || !reflect.DeepEqual(in, out) {
			t.Fatalf("round trip of %d bytes: %v", len(b), err)
		}
	})
}
