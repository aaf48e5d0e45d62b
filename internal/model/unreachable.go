package model

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
)

// ErrUnreachable marks an error reaching a database or a sink (the
// network, or the server down or starting): worth trying again as it
// is, unlike a refusal (a wrong password, a setting to fix). The API
// serves it as 503, not 400, so that a runbook retries it.
var ErrUnreachable = errors.New("cannot be reached")

// Unreachable marks err as ErrUnreachable, its text unchanged.
func Unreachable(err error) error {
	if err == nil {
		return nil
	}
	return unreachable{err}
}

type unreachable struct{ error }

func (u unreachable) Is(target error) bool { return target == ErrUnreachable }
func (u unreachable) Unwrap() error        { return u.error }

// DialFailed says err is a connection that could not be made or timed
// out: nothing listening, no route, no answer. Those pass by themselves
// (a server restarting, a network healing), so they are worth retrying
// as they are. A host name that does not resolve, a TLS handshake or
// certificate refused, a login refused are not: they need the request
// or the server's settings changed, and retrying them only hides that.
// Callers ask it of an error met connecting, not of any request: a
// deadline passed inside a request is no failed dial.
//
// A driver that tried several addresses joins their errors: one of them
// refused or timed out makes the whole worth a retry, even beside a
// name that did not resolve (a retired broker among live ones).
func DialFailed(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if anyTimeout(err) {
		return true
	}
	// A connection reset or closed is left out: a server that wants TLS
	// or a login closes on a client that offers neither, and that is a
	// setting to fix. Drivers that flatten the cause into text (one of
	// them formats it with %v) keep only the words.
	msg := err.Error()
	for _, s := range []string{"connection refused", "i/o timeout", "no route to host", "network is unreachable"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	// A resolver that failed for a while (timed out, a server failing)
	// is the network; a name it says does not exist is a typo until
	// shown otherwise.
	var dns *net.DNSError
	return errors.As(err, &dns) && (dns.IsTimeout || dns.IsTemporary && !dns.IsNotFound)
}

// anyTimeout says err, or any error joined or wrapped in it, is a
// network timeout.
func anyTimeout(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if anyTimeout(e) {
				return true
			}
		}
	case interface{ Unwrap() error }:
		return anyTimeout(u.Unwrap())
	}
	return false
}
