package storage

// Waiting is how many writes wait for spool room (tests only).
func (s *Sink) Waiting() int { return s.spool.waiting() }

// SpareBytes is the bytes of written files' buffers the sink keeps for
// its next batches (tests only).
func (s *Sink) SpareBytes() int { return s.spare.held() }
