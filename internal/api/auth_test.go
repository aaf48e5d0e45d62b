package api

import (
	"net/http"
	"net/http/httptest"
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
		{http.MethodPost, "/api/v2/changefeeds/demo/verify", RoleOperator},
		{http.MethodGet, "/api/v2/changefeeds/demo/verify", RoleViewer}, // 405, not a verify
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

// The scheme of an Authorization header is case-insensitive (RFC 7235):
// bearer, BEARER and Bearer all carry the token; another scheme, a
// missing token or a wrong one is 401.
func TestTheBearerSchemeIsCaseInsensitive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("tok-0123456789abcdef,ada,admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	h := Authenticate(tokens, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := PrincipalOf(r.Context()); !ok || p.User != "ada" {
			t.Errorf("authenticated as %+v", p)
		}
	}))
	for header, want := range map[string]int{
		"Bearer tok-0123456789abcdef": http.StatusOK, "bearer tok-0123456789abcdef": http.StatusOK,
		"BEARER  tok-0123456789abcdef ": http.StatusOK, "Basic tok-0123456789abcdef": http.StatusUnauthorized,
		"Bearer": http.StatusUnauthorized, "Bearer tok-0123456789abcdeX": http.StatusUnauthorized, "tok-0123456789abcdef": http.StatusUnauthorized,
	} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/api/v2/captures", nil)
		r.Header.Set("Authorization", header)
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("Authorization %q: %d, want %d", header, w.Code, want)
		}
	}
}
