package api

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"strings"
	"unicode"
)

// Role is what a token may do. Each role may do everything the roles
// below it may.
type Role int

const (
	// RoleViewer reads: every GET.
	RoleViewer Role = iota + 1
	// RoleOperator runs plans: drain, split, move, rebalance; pauses,
	// resumes and cancels plans and changefeeds.
	RoleOperator
	// RoleAdmin does everything, including creating and removing
	// changefeeds and making the coordinator resign.
	RoleAdmin
)

func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "viewer"
	case RoleOperator:
		return "operator"
	case RoleAdmin:
		return "admin"
	}
	return "none"
}

// ParseRole reads a role's name.
func ParseRole(s string) (Role, error) {
	for _, r := range []Role{RoleViewer, RoleOperator, RoleAdmin} {
		if s == r.String() {
			return r, nil
		}
	}
	if len(s) > 12 || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsLetter(r) }) >= 0 {
		// Not shown: a token written in the role's column (fields out of
		// order) would land in logs.
		return 0, fmt.Errorf("unknown role (%d characters, not shown: is a token in the role's column? the fields are token,user,role); use viewer, operator or admin", len(s))
	}
	return 0, fmt.Errorf("unknown role %q; use viewer, operator or admin", s)
}

// Principal is who a request comes from.
type Principal struct {
	User string
	Role Role
}

// Tokens are the bearer tokens an agent accepts (its --token-auth-file),
// kept by their SHA-256 so that looking one up does not compare the
// secret itself byte by byte.
type Tokens struct {
	by map[[32]byte]Principal
}

// LoadTokens reads a token file: one `token,user,role` per line, as
// kube-apiserver's static token file; blank lines and lines starting with
// # are skipped.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	t := &Tokens{by: map[[32]byte]Principal{}}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, ",")
		if len(parts) != 3 {
			return nil, fmt.Errorf("token file %s, line %d: want token,user,role", path, n)
		}
		token, user := strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1])
		role, err := ParseRole(strings.TrimSpace(parts[2]))
		if err != nil {
			return nil, fmt.Errorf("token file %s, line %d: %v", path, n, err)
		}
		if len(token) < 16 || user == "" {
			return nil, fmt.Errorf("token file %s, line %d: a token needs at least 16 characters and a user", path, n)
		}
		sum := sha256.Sum256([]byte(token))
		if _, dup := t.by[sum]; dup {
			return nil, fmt.Errorf("token file %s, line %d: the token is given twice", path, n)
		}
		t.by[sum] = Principal{User: user, Role: role}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	if len(t.by) == 0 {
		return nil, fmt.Errorf("token file %s has no tokens", path)
	}
	return t, nil
}

func (t *Tokens) lookup(token string) (Principal, bool) {
	p, ok := t.by[sha256.Sum256([]byte(token))]
	return p, ok
}

type principalKey struct{}

// PrincipalOf is who the request carrying ctx comes from; ok is false
// when the agent does not check tokens.
func PrincipalOf(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// RoleFor is the role a request needs. Reads need a viewer; plans,
// pausing and verify need an operator; everything else (creating and removing
// changefeeds, resigning the coordinator, what is not listed) an admin.
func RoleFor(method, path string) Role {
	if strings.HasPrefix(path, "/debug/") {
		// Profiles show memory contents (rows, tokens in flight).
		return RoleAdmin
	}
	if method == http.MethodGet || method == http.MethodHead {
		return RoleViewer
	}
	switch {
	case method == http.MethodPost && path == "/api/v2/plans",
		method == http.MethodPost && strings.HasPrefix(path, "/api/v2/plans/"),
		method == http.MethodPut && strings.HasPrefix(path, "/api/v2/captures/") && strings.HasSuffix(path, "/drain"),
		method == http.MethodPost && strings.HasPrefix(path, "/api/v2/changefeeds/") && (strings.HasSuffix(path, "/pause") || strings.HasSuffix(path, "/resume")),
		// verify reads the upstream's rows with the changefeed's
		// credentials: more than a viewer sees.
		method == http.MethodPost && strings.HasPrefix(path, "/api/v2/changefeeds/") && strings.HasSuffix(path, "/verify"):
		return RoleOperator
	}
	return RoleAdmin
}

// Authenticate checks every request's bearer token against tokens and
// its role against what the request needs (RoleFor): 401 without a valid
// token, 403 with a role too low. /healthz and /readyz stay open, and
// /metrics too unless metricsNeedToken. The principal rides on the
// request's context (PrincipalOf).
func Authenticate(tokens *Tokens, metricsNeedToken bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz", "/readyz":
			next.ServeHTTP(w, r)
			return
		case "/metrics":
			if !metricsNeedToken {
				next.ServeHTTP(w, r)
				return
			}
		}
		// The scheme's case does not matter (RFC 7235, 2.1).
		scheme, token, found := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
		found = found && strings.EqualFold(scheme, "Bearer")
		p, ok := tokens.lookup(strings.TrimSpace(token))
		if !found || !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cdcctl"`)
			writeError(w, Errorf(CodeUnauthenticated, "pass a token: cdcctl --token-file FILE, CDCCTL_TOKEN, or token-file in the config file",
				"this agent needs a valid bearer token"))
			return
		}
		if need := RoleFor(r.Method, r.URL.Path); p.Role < need {
			writeError(w, Errorf(CodeForbidden, fmt.Sprintf("ask for a token with the %s role (docs/security.md)", need),
				"user %s (role %s) may not %s %s: it needs the %s role", p.User, p.Role, r.Method, r.URL.Path, need))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}
