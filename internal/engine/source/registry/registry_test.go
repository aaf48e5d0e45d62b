package registry_test

import (
	"context"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/registry"
)

// A source the registry does not open says what it opens; a MySQL one
// says it is not ready and where to read why, showing no password.
func TestAnUnknownSourceSaysWhatIsOpened(t *testing.T) {
	for uri, want := range map[string]string{
		"kafka://host/topic":                      `unknown scheme "kafka"; use gen:// or postgres://`,
		"mysql://cdc:secret@host/shop?tables=t":   "the MySQL and MariaDB source is not ready yet",
		"mariadb://cdc:secret@host/shop?tables=t": "docs/mysql.md",
	} {
		_, err := registry.Open(context.Background(), uri, source.Env{})
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: %v; want %q", uri, err, want)
		}
	}
}
