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
