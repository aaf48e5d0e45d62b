package registry

import (
	"context"
	"testing"
)

// A sink that cannot be opened is a nil interface with the error: the
// checkpoint publisher kept "the sink it got" after a failed open, a nil
// *storage.Sink inside a non-nil interface, and its next write panicked.
func TestAFailedOpenGivesNoSink(t *testing.T) {
	for _, uri := range []string{"file:///dev/null/cannot-be-a-directory", "kafka://127.0.0.1:1/topic?dial-timeout=200ms"} {
		s, err := Open(context.Background(), uri, Env{})
		if err == nil {
			s.Close()
			t.Fatalf("%s opened", uri)
		}
		if s != nil {
			t.Fatalf("%s: a failed open returned a non-nil sink %#v (%v)", uri, s, err)
		}
	}
}
