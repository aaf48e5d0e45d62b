package configfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestATypoInAConfigFileIsRefusedNamingTheKeys(t *testing.T) {
	f := pflag.NewFlagSet("x", pflag.ContinueOnError)
	f.String("server", "", "")
	f.String("node-id", "", "")
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(good, []byte("server: a:1\nnode-id: n1\n"), 0o644)
	_ = os.WriteFile(bad, []byte("servr: a:1\nnod-id: n1\n"), 0o644)
	if err := Check(good, f); err != nil {
		t.Fatal(err)
	}
	err := Check(bad, f)
	if err == nil || !strings.Contains(err.Error(), `unknown key "nod-id", "servr"`) || !strings.Contains(err.Error(), "node-id, server") {
		t.Fatalf("a file with typos: %v", err)
	}
}
