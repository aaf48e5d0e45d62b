package storage

// Waiting is how many writes wait for spool room (tests only).
func (s *Sink) Waiting() int { return s.spool.waiting() }
