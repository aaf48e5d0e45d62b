package api

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTokenFilesAreCheckedLineByLine(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"tok-0123456789abcdef,ada,admin\n", ""},
		{"# comment\n\ntok-0123456789abcdef, ada , viewer\n", ""},
		{"tok-0123456789abcdef,ada\n", "line 1: want token,user,role"},
		{"tok-0123456789abcdef,ada,root\n", `line 1: unknown role "root"`},
		// Fields out of order put the token where the role goes: the
		// error does not show it (found by FuzzLoadTokens).
		{"ada,admin,tok-0123456789abcdef\n", "unknown role (20 characters, not shown"},
		{"short,ada,admin\n", "at least 16 characters"},
		{"tok-0123456789abcdef,ada,admin\ntok-0123456789abcdef,bob,viewer\n", "line 2: the token is given twice"},
		{"# nothing\n", "has no tokens"},
	} {
		path := filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(path, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadTokens(path)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q: %v; want %q", tc.body, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "tok-0123456789abcdef") {
			t.Errorf("the error shows a token: %v", err)
		}
	}
}

// Every endpoint of the API needs the role the docs give it; an endpoint
// not listed needs admin.
func TestEveryEndpointHasItsRole(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		want         Role
	}{
		{http.MethodGet, "/api/v2/captures", RoleViewer},
		{http.MethodGet, "/api/v2/plans/p-1/events", RoleViewer},
		{http.MethodPost, "/api/v2/plans", RoleOperator},
		{http.MethodPost, "/api/v2/plans/p-1/cancel", RoleOperator},
		{http.MethodPut, "/api/v2/captures/capture-2/drain", RoleOperator},
		{http.MethodPost, "/api/v2/changefeeds/demo/pause", RoleOperator},
		{http.MethodPost, "/api/v2/changefeeds/demo/resume", RoleOperator},
		{http.MethodPost, "/api/v2/changefeeds", RoleAdmin},
		{http.MethodDelete, "/api/v2/changefeeds/demo", RoleAdmin},
		{http.MethodPost, "/api/v2/coordinator/resign", RoleAdmin},
		{http.MethodPatch, "/api/v2/anything", RoleAdmin},
		{http.MethodGet, "/debug/pprof/heap", RoleAdmin},
	} {
		if got := RoleFor(tc.method, tc.path); got != tc.want {
			t.Errorf("%s %s needs %s; want %s", tc.method, tc.path, got, tc.want)
		}
	}
}

// A token file never makes LoadTokens panic, and its errors never show a
// token (the first field of a line).
func FuzzLoadTokens(f *testing.F) {
	f.Add("tok-0123456789abcdef,ada,admin\n")
	f.Add("tok-0123456789abcdef,ada,root\nx,y\n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, body string) {
		path := filepath.Join(dir, "tokens")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadTokens(path)
		if err == nil {
			return
		}
		for _, line := range strings.Split(body, "\n") {
			tok, _, _ := strings.Cut(strings.TrimSpace(line), ",")
			if len(tok) >= 16 && strings.Contains(err.Error(), tok) {
				t.Fatalf("the error shows a token: %v", err)
			}
		}
	})
}
