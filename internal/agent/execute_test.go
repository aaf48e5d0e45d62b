package agent

import (
	"bytes"
	"strings"
	"testing"
)

// What cdc-agent prints when it cannot start: etcd's TLS flags and
// values out of range are flags (exit 64, before anything starts), and an error quoting a URL with its
// secrets is masked, as its log lines are.
func TestTheAgentsStartErrorsExitAsDocumentedAndShowNoSecret(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--etcd", "https://127.0.0.1:1", "--etcd-cert", "c.pem"}, 64, "--etcd-cert and --etcd-key go together"},
		{[]string{"--etcd", "https://127.0.0.1:1", "--etcd-cacert", t.TempDir() + "/none.pem"}, 64, "--etcd-cacert"},
		{[]string{"--etcd", "http://127.0.0.1:1", "--addr", "127.0.0.1:0", "--checkpoint-store", "ftp://u:S3CRETX@h/x?secret_key=S3CRETX"}, 1, "ftp://"},
		// Values out of range are flags' errors, naming the range, not
		// start-up failures (a port no socket has was "is another agent
		// running there?").
		// (An agent that got past its flags ends at once, on its
		// checkpoint store.)
		{[]string{"--data-dir", t.TempDir(), "--checkpoint-store", "ftp://h/x", "--addr", "127.0.0.1:99999"}, 64, `--addr "127.0.0.1:99999": the port must be a number from 0 to 65535, got 99999`},
		{[]string{"--data-dir", t.TempDir(), "--checkpoint-store", "ftp://h/x", "--addr", "127.0.0.1:0", "--advertise-addr", "127.0.0.1:70000"}, 64, `--advertise-addr "127.0.0.1:70000": the port must be a number from 1 to 65535, got 70000`},
		{[]string{"playground", "--nodes", "12"}, 64, "--nodes must be between 1 and 9, got 12"},
		{[]string{"playground", "--port-base", "70000"}, 64, "--port-base 70000 is out of range: use 1024 to 65532 (the playground listens on port-base to port-base+3)"},
		{[]string{"playground", "--port-base", "65530", "--kafka"}, 64, "--port-base 65530 is out of range: use 1024 to 65522 (the playground listens on port-base to port-base+13)"},
	} {
		var stdout, stderr bytes.Buffer
		code := Execute(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.says) || strings.Contains(stderr.String(), "S3CRETX") {
			t.Errorf("cdc-agent %s: exit %d, want %d, saying %q:\n%s", strings.Join(tc.args, " "), code, tc.code, tc.says, stderr.String())
		}
	}
}

// 'cdcctl playground' runs this binary as cdcctl (its argv[0]): the help
// then reads as the command the operator typed, as cdcctl's others do;
// cdc-agent's own stays cdc-agent's.
func TestThePlaygroundsHelpNamesTheProgramTyped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ argv0, usage string }{
		{"/usr/local/bin/cdcctl", "Usage:\n  cdcctl playground [flags]\n"},
		{"/usr/local/bin/cdc-agent", "Usage:\n  cdc-agent playground [flags]\n"},
	} {
		var stdout, stderr bytes.Buffer
		if code := execute(invokedAs(tc.argv0), []string{"playground", "--help"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), tc.usage) {
			t.Errorf("%s playground --help: exit %d, want the usage line %q:\n%s%s", tc.argv0, code, tc.usage, stdout.String(), stderr.String())
		}
	}
}

// Its errors read as the program typed too: cdcctl's ("Error: …" and
// where the usage is), or cdc-agent's own ("cdc-agent: …"); the exit
// code is the same.
func TestThePlaygroundsErrorsNameTheProgramTyped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ argv0, says string }{
		{"/usr/local/bin/cdcctl", "Error: --nodes must be between 1 and 9, got 0\nRun 'cdcctl playground --help' for usage.\n"},
		{"/usr/local/bin/cdc-agent", "cdc-agent: --nodes must be between 1 and 9, got 0\n"},
	} {
		var stdout, stderr bytes.Buffer
		if code := execute(invokedAs(tc.argv0), []string{"playground", "--nodes", "0"}, &stdout, &stderr); code != 64 || stderr.String() != tc.says {
			t.Errorf("%s playground --nodes 0: exit %d, want 64, saying %q:\n%s", tc.argv0, code, tc.says, stderr.String())
		}
	}
}
