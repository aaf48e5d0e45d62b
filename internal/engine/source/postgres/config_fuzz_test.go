package postgres

import (
	"strings"
	"testing"
)

// FuzzParseURI: a source URI is operator input. Parsing never panics, an
// error never shows the password, and Redact hides it too.
func FuzzParseURI(f *testing.F) {
	for _, s := range []string{
		"postgres://cdc:secret@db:5432/shop?tables=public.orders,public.items&sslmode=disable",
		"postgres://cdc:secret@db/shop?tables=orders&publication=p&slot=s&snapshot=never&chunk-rows=100&snapshot-rate=1000",
		"postgresql://u@h:1/d?tables=a.b,c",
		"postgres://cdc:secret@[::1]:5432/shop?tables=%zz",
		"postgres://cdc:secret@db:99999/shop?tables=orders&chunk-rows=-1",
		"http://cdc:secret@db/x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		_, err := ParseURI(raw)
		const pw = "secret"
		// Only where "secret" is nothing but the password: a host or a
		// table of that name may be shown (the fuzzer found
		// "A:secret@secret").
		hasPW := strings.Contains(raw, ":"+pw+"@") && strings.Count(raw, pw) == 1
		if err != nil && hasPW && strings.Contains(err.Error(), pw) {
			t.Fatalf("the error shows the password: %v", err)
		}
		if hasPW && strings.Contains(Redact(raw), pw) {
			t.Fatalf("Redact(%q) = %q shows the password", raw, Redact(raw))
		}
	})
}
