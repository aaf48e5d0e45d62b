package postgres

import (
	"encoding/json"
	"strings"
)

// markHead is what every mark of a changefeed's own (a rewrite, enum
// values renamed, a relation's description, an ALTER PUBLICATION, a SET
// UNLOGGED) begins with: its
// kind, and the slot of the changefeed it is for (every reader on the
// database meets every changefeed's marks).
type markHead struct {
	Kind string `json:"kind"`
	Slot string `json:"slot"`
}

func (h *markHead) head() *markHead { return h }

// readMark reads content into m when it is a mark of kind: ok says it is
// one (which no partition is to see), mine that it is this changefeed's.
// The kind is looked for in the text first: most marks are other kinds'.
func (s *Stream) readMark(content []byte, kind string, m interface{ head() *markHead }) (ok, mine bool) {
	if !strings.Contains(string(content), kind) {
		return false, false
	}
	if err := json.Unmarshal(content, m); err != nil || m.head().Kind != kind {
		return false, false
	}
	return true, m.head().Slot == s.cfg.Slot
}
