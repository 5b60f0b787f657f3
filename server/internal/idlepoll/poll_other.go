//go:build !linux

package idlepoll

// Elsewhere than Linux there is no poller: it is built on epoll. A Conn
// is never bound, and New makes none.

// Poller is never made here.
type Poller[T comparable] struct{}

// Conn is never bound here.
type Conn[T comparable] struct{}

// Bound is false: no session parks here.
func (e *Conn[T]) Bound() bool { return false }

// TryRead is never called: no Conn is bound here.
func (e *Conn[T]) TryRead([]byte) (int, error) { return 0, ErrWouldBlock }

// TryWrite is never called: no Conn is bound here.
func (e *Conn[T]) TryWrite([]byte) (int, error) { return 0, ErrWouldBlock }

// New makes no poller here: nil, and no error.
func New[T comparable](Handler[T], Config) (*Poller[T], error) { return nil, nil }
