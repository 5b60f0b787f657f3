package server

// HolderParked reports whether the holder of lock name is parked in the
// idle poller (ok is false when nobody holds it).
func (s *Server) HolderParked(name string) (parked, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, _, ok := s.table.HolderOf(name)
	c := s.sessions[id]
	if !ok || c == nil || s.poller == nil {
		return false, ok
	}
	return s.poller.isParked(c), true
}

// PollerReadersStarted is how many reader goroutines the idle poller has
// started for sessions woken from their park.
func (s *Server) PollerReadersStarted() uint64 {
	s.mu.Lock() // Serve sets the poller under mu
	p := s.poller
	s.mu.Unlock()
	if p == nil {
		return 0
	}
	return p.readersStarted()
}

// NewGenerationNow starts the next generation of credentials at once, as
// the server does every Resume.GenerationPeriod of serving: the vectors'
// new_generation step.
func (s *Server) NewGenerationNow() error { return s.newGeneration() }
