package mysql

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Only a server that could not be dialled is worth the same request
// again (503): a host name that does not resolve is a URI to fix (400),
// and says so as plainly. (A refused dial and a wrong password are
// proven against a server in TestPreflightRefusesWithTheServersValuesAndTheFix.)
func TestOnlyAServerThatCannotBeDialledIsWorthARetry(t *testing.T) {
	cfg := Config{Host: "db.example", Port: 3306, User: "cdc", Password: "s3cret"}
	for _, tc := range []struct {
		name  string
		err   error
		retry bool
	}{
		{"a name that does not resolve", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "db.example", IsNotFound: true}}, false},
		{"a handshake past its deadline", fmt.Errorf("handshake: %w", context.DeadlineExceeded), true},
		{"a resolver that timed out", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "i/o timeout", Name: "db.example", IsTimeout: true}}, true},
	} {
		err := explain(cfg, tc.err)
		if !strings.Contains(err.Error(), "cannot reach the MySQL server at db.example:3306") || errors.Is(err, model.ErrUnreachable) != tc.retry {
			t.Errorf("%s: %v (worth a retry: %v, want %v)", tc.name, err, errors.Is(err, model.ErrUnreachable), tc.retry)
		}
	}
}
