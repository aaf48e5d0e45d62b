package model

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestOnlyAFailedDialIsUnreachable(t *testing.T) {
	// A port nobody listens on: take one and close it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, refused := net.DialTimeout("tcp", addr, 2*time.Second)
	if refused == nil {
		t.Skip("something listens on a port just closed")
	}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", fmt.Errorf("connect: %w", refused), true},
		{"refused, flattened by a driver", fmt.Errorf("dial tcp %s: %v", addr, refused), true},
		{"timeout", &net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}, true},
		{"host not found", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "pgdb.exmaple", IsNotFound: true}}, false},
		{"resolver timed out", &net.DNSError{Err: "i/o timeout", Name: "pgdb", IsTimeout: true}, true},
		{"certificate refused", fmt.Errorf("tls: %w", x509.UnknownAuthorityError{}), false},
		{"login refused", errors.New("password authentication failed for user \"cdc\""), false},
		{"connection reset", errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer"), false},
		{"nil", nil, false},
		{"deadline of a connect", fmt.Errorf("connect: %w", context.DeadlineExceeded), true},
		{"no route", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}, true},
		{"network unreachable", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ENETUNREACH)}, true},
		// A driver that tried several addresses joins their errors.
		{"a retired name beside a refused broker", errors.Join(&net.DNSError{Err: "no such host", Name: "k0", IsNotFound: true}, fmt.Errorf("k1: %w", refused)), true},
		{"a retired name beside a timed out one", errors.Join(&net.DNSError{Err: "no such host", Name: "k0", IsNotFound: true}, &net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}), true},
		{"a retired name beside a refused certificate", errors.Join(&net.DNSError{Err: "no such host", Name: "k0", IsNotFound: true}, x509.UnknownAuthorityError{}), false},
	}
	for _, c := range cases {
		if got := DialFailed(c.err); got != c.want {
			t.Errorf("%s: DialFailed(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
