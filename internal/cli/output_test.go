package cli

import (
	"bytes"
	"testing"
)

// A position is a uint64 past float64's exact range: -o jsonpath prints
// it digit for digit, as -o json does, so a script can compare it.
func TestJSONPathPrintsPositionsExactly(t *testing.T) {
	v := struct {
		CheckpointTs uint64 `json:"checkpoint_ts"`
	}{470763771207967233}
	var out bytes.Buffer
	if err := render(&out, "jsonpath={.checkpoint_ts}", false, v, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "470763771207967233\n"; got != want {
		t.Fatalf("-o jsonpath printed %q, want %q", got, want)
	}
}
