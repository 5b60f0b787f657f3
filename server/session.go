package server

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/locktable"
	"github.com/batonlock/baton/server/internal/idlepoll"
)

// session is one connection: one claim on one lock.
type session struct {
	srv  *Server
	id   locktable.SessionID
	conn net.Conn
	// remote is the client's address, made text only when shown (a view,
	// an event read, a log line): most sessions are never shown.
	remote net.Addr
	hdr    [wire.HeaderSize]byte // read buffer for headers; payloads only for ACQUIRE
	// poll is the connection as the idle poller sees it: its descriptor,
	// reads and writes that never wait, and the poller's books (see
	// idlepoll's doc for who may touch what). Not bound when the session
	// cannot park (no poller, or not a plain TCP connection).
	poll idlepoll.Conn[*session]
	// extra is what the client sent after its ACQUIRE in the same read,
	// or what the poller's shard read before it handed the session to a
	// reader goroutine: the reader takes it first.
	extra []byte
	// endFlush holds end's effects (a handover's push), so that a handover
	// allocates nothing for them.
	endFlush [2]*session
	// started is set by the session's reader (the poller's shard, or a
	// goroutine) once it has taken the ACQUIRE.
	started bool
	// firstDue is when the first frame must be whole: io-timeout after
	// accept (after the handshake with TLS).
	firstDue time.Time
	// readErr is the error of a read the poller's shard made before it
	// gave the session a reader goroutine: the reader reports it first
	// (readFirst, nextHeader). What the shard read is in extra.
	readErr error
	// waited is set by the reader once its first wait for a frame has begun
	// (see firstWait): later waits park at once.
	waited bool
	// closing is set when the session ends, before the poller is asked to
	// unpark it; park reads it (see idlePoller.MayPark).
	closing atomic.Bool

	// Guarded by srv.mu.
	ended   bool
	reason  EndReason
	inTable bool
	// version is the ACQUIRE's protocol version (0 before it).
	version uint8
	// v3 is the claim's version 3 state: its credential's inputs; nil for
	// a claim without a credential (resume.go).
	v3 *v3claim

	// wmu guards the output queue. Lock order: srv.mu before wmu.
	wmu      sync.Mutex
	out      []byte      // frames queued, in table order
	spare    []byte      // the other buffer, reused while out is written
	bufs     [2][12]byte // out's and spare's first buffers: an ACQUIRED (12 bytes) or a WAITING each
	flushing bool        // a goroutine is writing; it will pick up what is queued
	finish   bool        // after out is written: half-close, then drain and close
	dead     bool        // a write failed or the connection is closed
	pushAt   time.Time   // when the queued push's handover began (a reading of srv.now), for the histogram
	// lingerUntil is the read deadline halfClose set, zero before it; drain
	// restores it (see there).
	lingerUntil time.Time
	// peerGone, if not nil, is closed when drain sees the client's close,
	// or a write fails on its reset; set by EndTerm under srv.mu before the
	// session ends.
	peerGone     chan struct{}
	peerGoneOnce sync.Once
}

func newSession(s *Server, id locktable.SessionID, conn net.Conn) *session {
	c := &session{srv: s, id: id, conn: conn, remote: conn.RemoteAddr()}
	c.out, c.spare = c.bufs[0][:0], c.bufs[1][:0]
	if s.poller != nil {
		plain := conn
		if cc, ok := conn.(*countedConn); ok { // -max-conns-per-ip: only Close differs
			plain = cc.Conn
		}
		if raw := tcpRawConn(plain); raw != nil {
			c.initRaw(raw)
		}
	}
	return c
}

// serve is the session's reader: it reads every frame, answers it, and at
// the end closes the connection. It is the only goroutine that closes conn,
// except a flusher whose write failed (the socket is then useless), and the
// poller's shard while it serves the session instead. With Config.ParkIdle,
// a session with nothing to read parks: this goroutine ends, and resume
// takes over when the connection has something the shard does not handle
// itself, or the server ends the session.
func (c *session) serve() {
	reason, msg, parked := c.serveFrames()
	if !parked {
		c.end(reason, msg)
	}
}

// resume is the reader of a session that its shard hands to a goroutine:
// woken from its park, or before its ACQUIRE (see answerFirst).
func (c *session) resume() {
	if c.closing.Load() { // ended by the server: end delivers its ERROR
		c.end(ReasonClosed, "")
		return
	}
	if !c.started {
		c.serve()
		return
	}
	reason, msg, parked := c.serveLoop()
	if !parked {
		c.end(reason, msg)
	}
}

// end ends the session for reason, delivers what it owes, and closes the
// connection.
func (c *session) end(reason EndReason, msg string) {
	s := c.srv
	defer func() {
		c.conn.Close()
		s.m.connections.Dec()
		s.open.Add(-1)
	}()
	// A session the server ended (closing is set after its end, its reason
	// and its ERROR) owes the table nothing more: its reader does not take
	// mu, which a release of thousands of sessions would otherwise have
	// each of their readers queue for.
	if !c.closing.Load() {
		s.mu.Lock()
		fx := effects{flush: c.endFlush[:0], self: c}
		s.endOneLocked(s.now(), c, reason, msg, &fx)
		s.mu.Unlock()
		// Pushes to promoted waiters first: they are the handover.
		s.deliver(&fx)
	}
	// Its ERROR, queued by this end or by the server's (which started this
	// reader if the session was parked).
	c.flush()
	c.drain()
}

// serveFrames runs the session until it ends, and says why, or until it
// parks (parked is then true).
func (c *session) serveFrames() (reason EndReason, msg string, parked bool) {
	s := c.srv
	if reason, msg, ok := c.handshake(); !ok { // TLS, if on (tls.go)
		return reason, msg, false
	}
	// The first frame, whole, within io-timeout of accept (of the handshake
	// with TLS). A session the poller's shard handed on has its due time.
	if c.firstDue.IsZero() {
		c.firstDue = time.Now().Add(s.cfg.IOTimeout)
	}
	c.conn.SetReadDeadline(c.firstDue)
	var buf [firstReadSize]byte
	h, payload, err := c.readFirst(buf[:])
	if err != nil {
		reason, msg = c.readFailure(err, true)
		return reason, msg, false
	}
	if h.Type != wire.TypeAcquire {
		return ReasonProtocolError, fmt.Sprintf("first frame must be ACQUIRE, got %v", h.Type), false
	}
	c.conn.SetReadDeadline(time.Time{})
	req, err := wire.DecodeAcquireUpTo(payload, wire.Version3)
	if err != nil {
		var we *wire.Error
		errors.As(err, &we)
		return reasonFor(we.Code), we.Msg, false
	}
	c.started = true
	if req.Resuming() {
		if reason, msg, ok := c.resumeClaim(req); !ok {
			return reason, msg, false
		}
	} else if reason, msg, ok, _ := c.acquire(req, true); !ok {
		return reason, msg, false
	}
	c.send()
	return c.serveLoop()
}

// framesPerTurn is how many frames a session's reader answers in a turn:
// then it lets the others go first (yield). A client may pipeline frames
// without pause (the server answers each), but its reader would then never
// wait, and never leave the CPU to the poller's shards that answer every
// other session: 200 such clients starved well-behaved holders into losing
// their leases. A turn is long enough that no client that keeps to one
// heartbeat in flight ever reaches its end.
const framesPerTurn = 16

// pipelinePace tells a session that pipelines: one whose turn of
// framesPerTurn frames took less sends more than 64 frames a second. A
// client that waits for each answer heartbeats every quarter lease at the
// most, 16 times a second at the shortest lease baton run allows (250
// ms), and takes a second for a turn. The measure is the frames' rate,
// not how long the server took to answer them: a session whose every
// answer is a TLS write of its own takes over a millisecond a turn on a
// loaded machine, however fast it sends.
const pipelinePace = 250 * time.Millisecond

// serveLoop answers the frames after ACQUIRE until the session ends or
// parks, in turns of framesPerTurn frames.
func (c *session) serveLoop() (reason EndReason, msg string, parked bool) {
	turnAt := time.Now()
	for served := 0; ; served++ {
		if served == framesPerTurn {
			served = 0
			if c.yield(time.Since(turnAt)) {
				return 0, "", true
			}
			turnAt = time.Now()
		}
		h, parked, err := c.nextHeader()
		if parked {
			return 0, "", true
		}
		if err == errEnded {
			return c.reason, "", false // ended by the server meanwhile; its ERROR is queued
		}
		if err != nil {
			reason, msg = c.readFailure(err, false)
			return reason, msg, false
		}
		switch h.Type {
		case wire.TypeHeartbeat:
			if h.Length != 0 {
				return ReasonProtocolError, fmt.Sprintf("HEARTBEAT payload must be empty, got length %d", h.Length), false
			}
		case wire.TypeAcquire:
			return ReasonProtocolError, "second ACQUIRE on a session", false
		default:
			return ReasonProtocolError, fmt.Sprintf("unknown frame %v", h.Type), false
		}
		if !c.heartbeat() {
			return c.reason, "", false // ended by the server; its ERROR is queued
		}
		c.send()
	}
}

// yield ends a turn of the session's reader (see framesPerTurn), which
// took took, and reports whether the session parked: its reader must then
// return. A session that can park does, with its unread frames in the
// socket: its shard finds them at once, and reads them at its pace beside
// every other session of the shard (answerNext). One that cannot (TLS,
// -park-idle=false, frames already read into extra) goes to the back of
// the run queue; and if its turn took less than pipelinePace, it is
// pipelining, and its next turn waits for the server's budget of such
// turns (pipelineTurns), shared by every such session: so that, however
// many pipeline, the process is idle enough for the system to run it at
// once when a heartbeat comes. Either way it is read less often, never
// ended for it.
func (c *session) yield(took time.Duration) bool {
	s := c.srv
	if c.poll.Bound() && len(c.extra) == 0 && c.readErr == nil && s.poller.park(c) {
		return true
	}
	if took < pipelinePace {
		s.pipelining.Wait(s.stopCtx) // ends at once when the server stops
		return false
	}
	runtime.Gosched()
	return false
}

// heartbeat records a HEARTBEAT of c and queues its reply, and reports
// whether the session goes on: false if the server ended it meanwhile, or
// ends it now, its ERROR queued either way. A frame that came after the
// lease ran out, before the reaper looked, ends the session now, not at
// the reaper's next turn; so does any frame for every other session
// overdue (after a suspend of the machine, the reaper's timer is late).
func (c *session) heartbeat() (live bool) { return c.heartbeats(1) }

// heartbeats is heartbeat for n HEARTBEATs read together (pipelined): they
// are seen at one instant, in one hold of the server's mutex, and each
// gets its reply.
func (c *session) heartbeats(n int) (live bool) {
	s := c.srv
	now := s.now() // a suspend since the last frame counts as silence
	s.mu.Lock()
	if c.ended {
		s.mu.Unlock()
		return false
	}
	// A reply confirms the session: a leader that may no longer confirm
	// ends every session instead (and c with them).
	if !s.mayServeLocked(now) && s.cfg.Replica != nil {
		s.mu.Unlock()
		return false
	}
	var fx effects
	if st, ok := s.table.Seen(now, c.id); ok {
		for range n {
			c.queueState(st)
		}
		// Others overdue: the reaper's timer counts the monotonic clock and
		// is late by a suspend of the machine; they end at this look, as
		// at an ACQUIRE's.
		if next, ok := s.table.NextDeadline(); ok && !next.After(now) {
			s.settleLocked(now, s.table.Expire(now, s.exits[:0]), &fx)
		}
	} else {
		s.settleLocked(now, s.table.Expire(now, s.exits[:0]), &fx)
	}
	live = !c.ended
	s.mu.Unlock()
	s.deliver(&fx)
	s.m.heartbeats.Add(float64(n))
	return live
}
