// Package floor is the floor Baton is measured against: a minimal lock
// server that speaks Baton's wire protocol just far enough for the bench's
// clients (ACQUIRE, HEARTBEAT; WAITING, ACQUIRED, ERROR), and a bare
// accept/reply/close server. Whatever Baton spends above them is the price
// of its features (leases, limits, metrics, parking), which is what the
// comparison is there to show.
//
// The lock server is FIFO per name, a close is the release, one global
// mutex guards the table (no write is made under it), one goroutine serves
// each connection, and tokens rise with every grant. Nothing else: no
// lease expiry, no limits, no metrics, no parking, no timeouts.
package floor

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/batonlock/baton/bench/internal/baseline"
	"github.com/batonlock/baton/clients/go/wire"
)

// LockServer is the minimal close-is-release lock server.
type LockServer struct {
	mu    sync.Mutex
	locks map[string]*queue
	token uint64 // last token granted, any name: rising for each name too
}

type queue struct {
	holder  *session
	waiters []*session // FIFO
}

type session struct {
	c     net.Conn
	name  string
	token uint64 // 0 while waiting; guarded by LockServer.mu

	// wmu orders this connection's writes: the reply to ACQUIRE before
	// a push, a push before any ACQUIRED reply to a heartbeat. Taken
	// before LockServer.mu, never while holding it, so no write is ever
	// made under the global mutex.
	wmu  sync.Mutex
	told bool // the client knows of its grant (reply or push); guarded by wmu
	out  [wire.HeaderSize + 9]byte
}

// NewLockServer returns an empty lock server.
func NewLockServer() *LockServer { return &LockServer{locks: map[string]*queue{}} }

// Serve serves every connection ln accepts, each on a goroutine of its
// own, until ln is closed (nil) or accepting fails. The connections'
// goroutines end when their clients close.
func (s *LockServer) Serve(ln net.Listener) error {
	return baseline.AcceptEach(ln, func(c net.Conn) { go s.serve(c) })
}

// serve is one session: ACQUIRE, then heartbeats until the client closes.
func (s *LockServer) serve(c net.Conn) {
	defer c.Close()
	var r frameReader
	h, p, err := r.next(c)
	if err != nil {
		return
	}
	if h.Type != wire.TypeAcquire {
		c.Write(wire.AppendError(nil, wire.CodeProtocol, "first frame not ACQUIRE"))
		return
	}
	a, err := wire.DecodeAcquire(p)
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) {
			c.Write(wire.AppendError(nil, we.Code, we.Msg))
		}
		return
	}
	me := &session{c: c, name: a.Name}
	me.wmu.Lock() // a push waits for the reply
	s.mu.Lock()
	q := s.locks[a.Name]
	if q == nil {
		q = &queue{}
		s.locks[a.Name] = q
	}
	switch {
	case q.holder == nil:
		s.token++
		me.token = s.token
		q.holder = me
		s.mu.Unlock()
		me.told = true
		c.Write(wire.AppendAcquired(me.out[:0], false, me.token))
	case a.NoWait():
		s.mu.Unlock()
		me.wmu.Unlock()
		c.Write(wire.AppendError(nil, wire.CodeBusy, "held"))
		return
	default:
		q.waiters = append(q.waiters, me)
		pos := len(q.waiters)
		s.mu.Unlock()
		c.Write(wire.AppendWaiting(me.out[:0], uint32(pos)))
	}
	me.wmu.Unlock()
	defer s.release(me)
	for {
		h, _, err := r.next(c)
		if err != nil {
			return
		}
		if h.Type != wire.TypeHeartbeat {
			c.Write(wire.AppendError(nil, wire.CodeProtocol, "unexpected frame"))
			return
		}
		me.wmu.Lock()
		s.mu.Lock()
		token, pos := me.token, 0
		if token == 0 {
			for i, w := range q.waiters {
				if w == me {
					pos = i + 1
					break
				}
			}
		}
		s.mu.Unlock()
		if token != 0 {
			// Granted, and the promoter has not written the push yet:
			// write it here, ahead of the reply, as the protocol orders.
			s.tell(me)
			c.Write(wire.AppendAcquired(me.out[:0], false, token))
		} else {
			c.Write(wire.AppendWaiting(me.out[:0], uint32(pos)))
		}
		me.wmu.Unlock()
	}
}

// tell writes the push to me unless it was written already; me.wmu is
// held.
func (s *LockServer) tell(me *session) {
	if !me.told {
		me.told = true
		me.c.Write(wire.AppendAcquired(me.out[:0], true, me.token))
	}
}

// release ends me: a holder's end promotes the head of the queue at once,
// a waiter's end takes it out of the queue.
func (s *LockServer) release(me *session) {
	var next *session
	s.mu.Lock()
	q := s.locks[me.name]
	if q.holder == me {
		q.holder = nil
		if len(q.waiters) > 0 {
			next = q.waiters[0]
			q.waiters[0] = nil
			q.waiters = q.waiters[1:]
			s.token++
			next.token = s.token
			q.holder = next
		}
	} else {
		for i, w := range q.waiters {
			if w == me {
				q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
				break
			}
		}
	}
	if q.holder == nil && len(q.waiters) == 0 {
		delete(s.locks, me.name)
	}
	s.mu.Unlock()
	if next != nil {
		next.wmu.Lock()
		s.tell(next)
		next.wmu.Unlock()
	}
}

// BareServer is the floor of an uncontended claim: it accepts, reads one
// frame, answers it with an ACQUIRED reply, and closes once the client
// has closed. No table, no mutex.
type BareServer struct {
	token atomic.Uint64
}

// Serve serves every connection ln accepts until ln is closed.
func (s *BareServer) Serve(ln net.Listener) error {
	return baseline.AcceptEach(ln, func(c net.Conn) {
		go func() {
			defer c.Close()
			var r frameReader
			if _, _, err := r.next(c); err != nil {
				return
			}
			var out [wire.HeaderSize + 9]byte
			if _, err := c.Write(wire.AppendAcquired(out[:0], false, s.token.Add(1))); err != nil {
				return
			}
			var b [64]byte
			for {
				if _, err := c.Read(b[:]); err != nil {
					return
				}
			}
		}()
	})
}

// frameReader reads whole frames through one buffer: a frame usually
// costs one read system call.
type frameReader struct {
	buf  [wire.MaxFrame]byte
	r, w int
}

func (f *frameReader) next(c net.Conn) (wire.Header, []byte, error) {
	for {
		h, p, n, err := wire.Split(f.buf[f.r:f.w])
		if err != nil {
			return h, nil, err
		}
		if n > 0 {
			f.r += n
			if f.r == f.w {
				f.r, f.w = 0, 0
			}
			return h, p, nil
		}
		if f.r > 0 {
			f.w = copy(f.buf[:], f.buf[f.r:f.w])
			f.r = 0
		}
		m, err := c.Read(f.buf[f.w:])
		f.w += m
		if err != nil && m == 0 {
			if err == io.EOF && f.w > 0 {
				err = io.ErrUnexpectedEOF
			}
			return h, nil, err
		}
	}
}
