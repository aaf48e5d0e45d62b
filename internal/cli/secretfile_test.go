package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/viper"
)

// writeMode writes a file of mode exactly (past the umask).
func writeMode(t *testing.T, dir, name, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// A URI file's refusals show nothing of what it holds, and what an
// editor or a secret store writes around the URI (CRLF, blank lines,
// spaces) is not part of it.
func TestAURIFileGivesItsURIAloneAndShowsNothingOfItInRefusals(t *testing.T) {
	const secret = "postgres://cdc:Pa55@db:5432/shop"
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string { return writeMode(t, dir, name, body, mode) }
	for _, c := range []struct {
		name, body, want, refused string
	}{
		{"crlf", "\r\n" + secret + "\r\n\r\n", secret, ""},
		{"spaces", "  " + secret + "\t\n", secret, ""},
		{"two", secret + "\n" + secret + "x\n", "", "holds 2 lines"},
		{"blank", " \n\t\n", "", "is empty"},
		{"large", secret + "?x=" + strings.Repeat("a", maxSecretFile), "", "holds more than 64 KiB"},
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

// A sink's credentials come from a file of K=V lines: comments and blank
// lines are skipped, a line that is not K=V is named by its number and
// not shown (it may be the password), and a key given both in the file
// and as a flag is refused.
func TestASinkOptionFileGivesItsOptionsAndShowsNoValueInRefusals(t *testing.T) {
	dir := t.TempDir()
	var errOut bytes.Buffer
	o := &options{errOut: &errOut}
	good := writeMode(t, dir, "good", "# the brokers' login\r\nsasl-user=cdc\n\n  sasl-password=Pa55=word  \n", 0o600)
	got, err := o.sinkOptionsFile(good)
	if want := []string{"sasl-user=cdc", "sasl-password=Pa55=word"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("options file: %q, %v; want %q", got, err, want)
	}
	opts, err := parseSinkOptions(append([]string{"flush-interval=1s"}, got...), true)
	if err != nil || opts["sasl-password"] != "Pa55=word" || opts["sasl-user"] != "cdc" || len(opts) != 3 {
		t.Fatalf("options: %v, %v", opts, err)
	}
	if _, err := parseSinkOptions(append([]string{"sasl-user=other"}, got...), true); err == nil || !strings.Contains(err.Error(), "sasl-user is given twice") {
		t.Fatalf("a key in the file and a flag: %v; want refused", err)
	}
	if _, err := parseSinkOptions([]string{"sasl-password= Pa55"}, true); err == nil || !strings.Contains(err.Error(), "no space around =") || strings.Contains(err.Error(), "Pa55") {
		t.Fatalf("a value with a space before it: %v; want refused, the value not shown", err)
	}
	for name, c := range map[string]struct{ body, refused string }{
		"bare":     {"sasl-user=cdc\n\nPa55\n", "line 3 is not K=V"},
		"nokey":    {"=Pa55\n", "line 1 is not K=V"},
		"base64":   {"UGE1NQ==\n", "line 1 is not K=V"},
		"spaced":   {"sasl-password = Pa55\n", "line 1 is not K=V, K a sink option's name (e.g. sasl-password=…, with no space around ="},
		"comments": {"# nothing yet\n\n", "has no K=V line"},
		"empty":    {"", "has no K=V line"},
	} {
		_, err := o.sinkOptionsFile(writeMode(t, dir, name, c.body, 0o600))
		if err == nil || !strings.Contains(err.Error(), c.refused) || strings.Contains(err.Error(), "Pa55") || exitCodeOf(err) != ExitUsage {
			t.Errorf("%s: %v (exit %d); want refused (64), %q, nothing of the file", name, err, exitCodeOf(err), c.refused)
		}
	}
	if errOut.Len() != 0 {
		t.Errorf("files only their owner reads were warned of: %s", errOut.String())
	}
}

// The bearer token's file follows the same rules: one line, a file
// others read said once however many clients a command builds, nothing
// of it in a refusal.
func TestATokenFileIsReadByTheSameRules(t *testing.T) {
	dir := t.TempDir()
	var errOut bytes.Buffer
	o := &options{v: viper.New(), errOut: &errOut}
	o.v.Set("token-file", writeMode(t, dir, "open.token", "admin-Pa55\r\n", 0o644))
	for range 2 {
		if tok, err := o.token(); err != nil || tok != "admin-Pa55" {
			t.Fatalf("token: %q, %v", tok, err)
		}
	}
	if w := errOut.String(); w != "" {
		t.Fatalf("a token file others read (a mounted secret's default) is read by every command, and not warned of: %q", w)
	}
	o.v.Set("token-file", writeMode(t, dir, "two.token", "admin-Pa55\nviewer-Pa55\n", 0o600))
	if _, err := o.token(); err == nil || !strings.Contains(err.Error(), "holds 2 lines: want the token alone") || strings.Contains(err.Error(), "Pa55") {
		t.Fatalf("a token file of two lines: %v", err)
	}
	o.v.Set("token-file", filepath.Join(dir, "missing.token"))
	if _, err := o.token(); err == nil || !strings.Contains(err.Error(), "--token-file") {
		t.Fatalf("a missing token file: %v", err)
	}
}
