package agent

import (
	"bytes"
	"strings"
	"testing"
)

// What cdc-agent prints when it cannot start: etcd's TLS flags are flags
// (exit 64, before anything starts), and an error quoting a URL with its
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
	} {
		var stdout, stderr bytes.Buffer
		code := Execute(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.says) || strings.Contains(stderr.String(), "S3CRETX") {
			t.Errorf("cdc-agent %s: exit %d, want %d, saying %q:\n%s", strings.Join(tc.args, " "), code, tc.code, tc.says, stderr.String())
		}
	}
}
