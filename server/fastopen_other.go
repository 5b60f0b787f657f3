//go:build !linux

package server

import "net"

const fastOpenSupported = false

// enableFastOpen is never called: Validate refuses TCPFastOpen here.
func (s *Server) enableFastOpen(ln net.Listener) {}
