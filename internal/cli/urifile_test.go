package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A URI file's refusals show nothing of what it holds, and what an
// editor or a secret store writes around the URI (CRLF, blank lines,
// spaces) is not part of it.
func TestAURIFileGivesItsURIAloneAndShowsNothingOfItInRefusals(t *testing.T) {
	const secret = "postgres://cdc:Pa55@db:5432/shop"
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // (past the umask)
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name, body, want, refused string
	}{
		{"crlf", "\r\n" + secret + "\r\n\r\n", secret, ""},
		{"spaces", "  " + secret + "\t\n", secret, ""},
		{"two", secret + "\n" + secret + "x\n", "", "holds 2 lines"},
		{"blank", " \n\t\n", "", "is empty"},
		{"large", secret + "?x=" + strings.Repeat("a", maxURIFile), "", "holds more than 64 KiB"},
	} {
		var errOut bytes.Buffer
		o := &options{in: strings.NewReader(c.body), errOut: &errOut}
		for _, path := range []string{write(c.name, c.body, 0o600), "-"} {
			got, err := o.uriFlag("source", "", path)
			if c.refused == "" {
				if err != nil || got != c.want {
					t.Errorf("%s from %s: %q, %v; want %q", c.name, path, got, err, c.want)
				}
			} else if err == nil || !strings.Contains(err.Error(), c.refused) || strings.Contains(err.Error(), "Pa55") || exitCodeOf(err) != ExitUsage {
				t.Errorf("%s from %s: %q, %v (exit %d); want refused (64), %q, no password", c.name, path, got, err, exitCodeOf(err), c.refused)
			}
		}
		if errOut.Len() != 0 {
			t.Errorf("%s: a file only its owner reads was warned of: %s", c.name, errOut.String())
		}
	}
	var errOut bytes.Buffer
	o := &options{errOut: &errOut}
	open := write("open", secret+"\n", 0o640)
	if got, err := o.uriFlag("source", "", open); err != nil || got != secret {
		t.Fatalf("a file its group reads: %q, %v; want it used", got, err)
	}
	if w := errOut.String(); !strings.Contains(w, "can be read by other users (mode 0640)") || !strings.Contains(w, "chmod 600 "+open) || strings.Contains(w, "Pa55") {
		t.Fatalf("the warning for a file its group reads: %q", w)
	}
	errOut.Reset()
	if got, err := o.uriFlag("source", "", write("writable", secret+"\n", 0o620)); err != nil || got != secret || errOut.Len() != 0 {
		t.Fatalf("a file its group may write but not read: %q, %v, warned %q; want it used without a warning", got, err, errOut.String())
	}
	if _, err := o.uriFlag("source", secret, open); err == nil || exitCodeOf(err) != ExitUsage {
		t.Fatalf("--source with --source-file: %v; want a usage error", err)
	}
}
