// Package system is the one interface every lock service in the benchmark
// implements, Baton and its peers alike, so each scenario runs the same
// code against all of them.
package system

import (
	"context"
	"errors"
)

// ErrUnavailable wraps the reason a system is skipped: its server is not
// installed or not reachable. The bench prints it and goes on.
var ErrUnavailable = errors.New("system unavailable")

// A System is a lock service under test.
type System interface {
	// Name is the label in tables and charts ("baton", "redis", ...).
	Name() string
	// Version is the server's version as reported by the server itself
	// (or the package), for docs/benchmarks.md.
	Version(ctx context.Context) (string, error)
	// NewClient opens one client the way that system's users hold one:
	// a connection (Redis, PostgreSQL), a session (etcd, ZooKeeper). For
	// Baton a client dials a new connection per claim, as the protocol
	// requires. id numbers clients in a scenario from 0.
	NewClient(ctx context.Context, id int) (Client, error)
	// Close releases what the System itself holds (pools, admin
	// connections). Clients are closed by the scenario.
	Close() error
}

// A Client takes and lets go of named locks, one at a time.
type Client interface {
	// Lock blocks until this client holds the lock name, or ctx ends.
	// It returns only once the holder may act on the resource; the bench
	// times the handover as the interval from the previous holder's
	// Unlock call to this return.
	Lock(ctx context.Context, name string) error
	// Unlock lets go of the lock; the next waiter may then take it.
	Unlock(ctx context.Context, name string) error
	// Close ends the client (and any lock it holds).
	Close() error
}

// Semaphores is a service that serves counting semaphores: a name that
// up to limit clients hold at once, the others waiting in line.
type Semaphores interface {
	// Name, Version and Close are as in System.
	Name() string
	Version(ctx context.Context) (string, error)
	Close() error
	// NewSlotClient opens one client the way that system's users hold
	// one. Its Lock blocks until the client holds one of the name's limit
	// slots, or ctx ends; its Unlock gives the slot back. id numbers
	// clients in a scenario from 0.
	NewSlotClient(ctx context.Context, id, limit int) (Client, error)
}
