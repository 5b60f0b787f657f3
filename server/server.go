// Package server is Baton's network edge: the accept loop, one reader per
// session, deadlines, admin actions, metrics and Shutdown. It turns the
// outcomes of the lock table into frames.
package server

import (
	"context"
	"net"

	"github.com/prometheus/client_golang/prometheus"
)

// Server serves the Baton protocol. Make one with New.
type Server struct {
	cfg Config
	reg *prometheus.Registry
}

// New returns a server with cfg, after checking it.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, reg: prometheus.NewRegistry()}, nil
}

// Serve accepts sessions on ln until Shutdown; it then returns ErrServerClosed.
func (s *Server) Serve(ln net.Listener) error { panic("TODO: being written") }

// Shutdown tells every session ERROR SHUTDOWN, closes the listeners and
// waits, under ctx, for every session goroutine to end.
func (s *Server) Shutdown(ctx context.Context) error { panic("TODO: being written") }

// Ready reports whether the server accepts new sessions: false from the start of Shutdown.
func (s *Server) Ready() bool { panic("TODO: being written") }

// Registry holds the server's metrics, for /metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Locks describes every lock that has a holder or waiters, sorted by name.
func (s *Server) Locks() []LockView { panic("TODO: being written") }

// Lock describes one lock; false if nobody holds or waits.
func (s *Server) Lock(name string) (LockView, bool) { panic("TODO: being written") }

// ForceRelease ends the holder's session of lock name with ERROR
// FORCE_RELEASED and promotes the next waiter. ErrNotHeld if nobody holds it.
func (s *Server) ForceRelease(name string) (SessionView, error) { panic("TODO: being written") }

// Kick ends waiter id with ERROR KICKED. ErrUnknownSession if there is no
// such session, ErrHolder if it holds its lock.
func (s *Server) Kick(id string) (SessionView, error) { panic("TODO: being written") }
