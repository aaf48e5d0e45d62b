package api

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzDecodeOptional: whatever a client sends, decoding either succeeds or
// fails with a bad_request error; it never panics or returns another code.
func FuzzDecodeOptional(f *testing.F) {
	for _, s := range []string{"", "{}", `{"wait":"10s"}`, "{bad", `{"wait":1}`, `{"x":1}`, "{} {}", "null", " \n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest("POST", "/api/v2/coordinator/resign", strings.NewReader(body))
		var req ResignRequest
		err := decodeOptional(r, &req)
		if err != nil && !IsCode(err, CodeBadRequest) {
			t.Fatalf("body %q: %v is not bad_request", body, err)
		}
	})
}
