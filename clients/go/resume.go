package baton

import (
	"context"
	"net"
	"time"
)

// Claims that survive a change of leader (protocol version 3).
//
// A claim is sent as protocol version 3 unless WithResume(false), and a
// server of version 3 gives it a credential. When that server ends the
// claim's connection itself (a restart, a change of leader: SHUTDOWN,
// NOT_LEADER, the end of the stream with no ERROR) or goes silent, the
// client carries the claim to the next server on a new connection, within
// its own deadline: a holder keeps its token and its Lock, a waiter its
// place in the queue. This is a move; the user's code sees none of it.

// WithResume(false) sends every claim as protocol version 1 (exclusive)
// or 2 (shared), byte for byte as a client without protocol version 3:
// the claim ends with its connection, as it always did. Turn it off for
// clients that reach the server through a TCP proxy that terminates the
// connection on both sides (a TCP-mode load balancer): the proxy's own
// restart closes both sides cleanly, which the server takes for a release
// and the client for its server's going away (docs/protocol.md, "When a
// conflict can arise"). Default true: version 3, falling back to version
// 1 or 2 by itself where a server answers VERSION (remembered per
// address for a minute).
func WithResume(on bool) Option { return func(s *settings) { s.noResume = !on } }

// Moved describes a claim carried to a new connection, for WithMovedFunc.
// It holds nothing secret: the claim's credential is never given out.
type Moved struct {
	// Name is the lock's name.
	Name string
	// From and To are the addresses of the connection the claim left and
	// of the one that took it over (the same address after a server's
	// restart).
	From, To string
	// Reason is what began the move: the server's ERROR (matching
	// ErrShutdown, ErrNotLeader or ErrOverloaded), the end of the
	// connection with no ERROR, or silence (a heartbeat unanswered for
	// half of the time left to the deadline; a waiter's deadline).
	Reason error
	// Held reports whether the claim held the lock (it waited otherwise;
	// a waiter granted during the move holds when it lands).
	Held bool
	// Attempts is the number of resume attempts made, and Took the time
	// from the move's start to the answer that ended it.
	Attempts int
	Took     time.Duration
	// Token is the lock's fencing token, the same as before the move;
	// 0 for a waiter.
	Token uint64
}

// WithMovedFunc has f called each time a claim moves to a new connection
// (see Moved): while Acquire waits, and while the lock is held. f runs on
// the claim's goroutine, so it must return at once; nil, the default,
// reports nothing. For progress displays such as baton run's, which says
// that the claim moved; WithLogger logs the same at Info.
func WithMovedFunc(f func(Moved)) Option { return func(s *settings) { s.moved = f } }

// v3Retry is how long a Client sends an address protocol version 1 or 2
// after it answered VERSION to version 3, before it tries version 3 there
// again: a server upgraded meanwhile then speaks it.
const v3Retry = time.Minute

// speaksV3 reports whether a new claim to addr is sent as version 3.
func (c *Client) speaksV3(addr string) bool {
	c.v3mu.Lock()
	defer c.v3mu.Unlock()
	at, ok := c.noV3At[normalAddr(addr)]
	if !ok {
		return true
	}
	if time.Since(at) >= v3Retry {
		delete(c.noV3At, normalAddr(addr))
		return true
	}
	return false
}

// noV3 records that addr answered VERSION to version 3.
func (c *Client) noV3(addr string) {
	c.v3mu.Lock()
	defer c.v3mu.Unlock()
	if c.noV3At == nil {
		c.noV3At = make(map[string]time.Time)
	}
	c.noV3At[normalAddr(addr)] = time.Now()
}

// mover is what a claim of set needs of c to move.
func (c *Client) mover(set *settings) mover {
	resumeSet := *set
	if !resumeInSYN() {
		resumeSet.fastOpen, resumeSet.syn = false, nil // never a resume in a SYN's data
	}
	return mover{
		addrs: c.addrs,
		index: c.index,
		dial: func(ctx context.Context, addr string) (net.Conn, net.Conn, error) {
			return c.dial(ctx, addr, &resumeSet)
		},
		answered: func(i int) { c.last.Store(uint32(i)) },
		noV3:     c.noV3,
	}
}
