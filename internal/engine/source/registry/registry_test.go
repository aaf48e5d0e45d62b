package registry_test

import (
	"context"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/registry"
)

// A source the registry does not open says what it opens; a MySQL URI
// that no changefeed stored says so, showing no password.
func TestAnUnknownSourceSaysWhatIsOpened(t *testing.T) {
	for uri, want := range map[string]string{
		"kafka://host/topic":                      `unknown scheme "kafka"; use gen://, postgres:// or mysql://`,
		"mysql://cdc:secret@host/shop?tables=t":   "not a changefeed's stored URI",
		"mariadb://cdc:secret@host/shop?tables=t": "start and server-id are set when it is created",
	} {
		_, err := registry.Open(context.Background(), uri, source.Env{})
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: %v; want %q", uri, err, want)
		}
	}
}
