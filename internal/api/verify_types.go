package api

// VerifyRequest is POST /api/v2/changefeeds/{id}/verify. The agent that
// answers reads the changefeed's sink, and for a database source its
// upstream, with the changefeed's own credentials; the answer is a
// model.VerifyReport (200, whatever it found: OK says whether nothing
// was lost).
type VerifyRequest struct {
	// WaitMs bounds the wait for the checkpoint to pass the point the
	// upstream was read at (database sources); 0 is a minute.
	WaitMs int64 `json:"wait_ms,omitempty"`
}
