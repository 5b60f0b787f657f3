package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
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

// errWouldBlock says that a session has nothing to read now.
var errWouldBlock = idlepoll.ErrWouldBlock

// firstReadSize is the first read's buffer: a header and a usual ACQUIRE
// payload (names and owners are mostly short) in one read.
const firstReadSize = 128

// readFirst reads the first frame, most often in one read into buf. It
// returns its payload only for an ACQUIRE (the caller refuses any other
// frame). What the client sent after the frame (a HEARTBEAT sent before
// the answer came) is kept in c.extra for nextHeader. What the poller's
// shard read before it handed the session on (c.extra, c.readErr) comes
// first.
func (c *session) readFirst(buf []byte) (wire.Header, []byte, error) {
	if err := c.takeReadErr(); err != nil {
		return wire.Header{}, nil, err
	}
	n := copy(buf, c.extra) // the shard reads at most len(buf)
	c.extra = nil
	if n < wire.HeaderSize {
		m, err := io.ReadAtLeast(c.conn, buf[n:], wire.HeaderSize-n)
		n += m
		if err != nil {
			if err == io.EOF && n > 0 {
				err = io.ErrUnexpectedEOF
			}
			return wire.Header{}, nil, err
		}
	}
	h, err := wire.ParseHeader(buf)
	if err != nil || h.Type != wire.TypeAcquire {
		return h, nil, err
	}
	end := wire.HeaderSize + int(h.Length)
	if end > len(buf) { // a long payload: n < end
		payload := make([]byte, h.Length)
		got := copy(payload, buf[wire.HeaderSize:n])
		if _, err := io.ReadFull(c.conn, payload[got:]); err != nil {
			return h, nil, err
		}
		return h, payload, nil
	}
	if n < end {
		if _, err := io.ReadFull(c.conn, buf[n:end]); err != nil {
			return h, nil, err
		}
	} else if n > end {
		c.extra = append([]byte(nil), buf[end:n]...)
	}
	return h, buf[wire.HeaderSize:end], nil
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

// acquire enters the session in the table and queues its answer. With
// mayWait false (the idle poller's shard) it does nothing and reports
// wouldWait when noting the lease would wait for a disk write or a Raft
// round: the caller then hands the ACQUIRE to a reader goroutine.
func (c *session) acquire(req wire.Acquire, mayWait bool) (reason EndReason, msg string, ok, wouldWait bool) {
	s := c.srv
	now := s.now()
	lease := time.Duration(req.LeaseMs) * time.Millisecond
	if reason, msg, ok := c.authorize(req.Name, Kind{Shared: req.Shared(), Limit: int(req.Limit)}); !ok { // access rules (security.go)
		return reason, msg, false, false
	}
	if s.cfg.MaxLease > 0 && lease > s.cfg.MaxLease {
		return ReasonBadRequest, fmt.Sprintf("lease %v is longer than this server's maximum of %v (-max-lease)", lease, s.cfg.MaxLease), false, false
	}
	// Before the table, outside mu: a lease that grows the recorded bound
	// waits for its fsync (or its Raft commit), and must be durable before
	// any grant with it.
	if noter := s.cfg.leaseNoter(); noter != nil && !s.closing.Load() {
		var err error
		switch {
		case mayWait:
			err = s.noteLease(lease) // with the server's own descriptors if none is free (fdreserve.go)
		case s.cfg.Replica != nil:
			var done bool
			if done, err = s.cfg.Replica.TryNoteLease(lease); !done {
				return 0, "", false, true
			}
		case int64(lease) > s.noted.Load():
			return 0, "", false, true
		default:
			err = noter.NoteLease(lease) // no longer than one noted: no wait
		}
		if err != nil {
			if errors.Is(err, ErrNotLeader) {
				return ReasonNotLeader, s.leaderHint(), false, false
			}
			s.log.Error("cannot record the lease bound; session refused", "lease", lease.String(), "err", err)
			return ReasonOverloaded, "cannot record lease " + lease.String() + " for crash recovery", false, false
		}
		s.leaseNoted(lease)
	}
	var fx effects
	defer s.deliver(&fx) // after the unlock
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.ended {
		return c.reason, "", false, false
	}
	if s.closing.Load() {
		return ReasonShutdown, "server shutting down", false, false
	}
	// An answer confirms (and may grant): a leader that may no longer do
	// either ends every session, c with them.
	if !s.mayServeLocked(now) {
		return ReasonNotLeader, s.leaderHint(), false, false
	}
	c.version = req.Version
	// A version 1 claim, and a version 2 one without SHARED, is exclusive.
	shared := req.Shared()
	st, refusal, exits, err := s.table.Acquire(now, c.id, locktable.Request{
		Name: req.Name, Owner: req.Owner, Lease: lease, NoWait: req.NoWait(),
		Shared: shared, Limit: int(req.Limit),
	}, s.exits[:0])
	s.settleLocked(now, exits, &fx) // overdue sessions, expired on the way
	// An error is a bug: ids are unique, and the lease and limit were checked.
	if err != nil {
		return ReasonProtocolError, err.Error(), false, false
	}
	switch refusal {
	case locktable.RefusedLimit:
		limit, _ := s.table.Limit(req.Name)
		return ReasonLimitMismatch, strconv.Itoa(limit), false, false
	case locktable.RefusedBusy:
		return ReasonBusy, s.busyMessageLocked(req.Name, shared), false, false
	case locktable.RefusedSessions:
		s.m.refusedSess.Inc()
		return ReasonOverloaded, fmt.Sprintf("session limit of %d reached", s.cfg.MaxSessions), false, false
	case locktable.RefusedGrace:
		until, _ := s.table.GraceUntil()
		if s.cfg.Replica != nil {
			return ReasonBusy, fmt.Sprintf("failover grace: no lock is granted for %v more", max(until.Sub(now), 0).Round(time.Millisecond)), false, false
		}
		left := max(until.Sub(now), 0)
		return ReasonOverloaded, fmt.Sprintf("crash-recovery grace period: no lock is granted for %v more (until %s); retry after it",
			left.Round(time.Millisecond), time.Now().Add(left).UTC().Format(time.RFC3339Nano)), false, false
	case locktable.RefusedWaiters:
		s.m.refusedWaiters.Inc()
		return ReasonOverloaded, fmt.Sprintf("lock %q has the limit of %d waiters", req.Name, s.cfg.MaxWaitersPerLock), false, false
	}
	c.inTable = true
	s.sessions[c.id] = c
	if req.Version == wire.Version3 {
		c.v3 = s.newV3Locked(now, c, req, st)
	}
	if st.Held {
		s.m.holding.Inc()
		s.m.grantImmediate.Inc()
		s.m.claimGrant(shared)
		s.m.series(req.Name).wait.Observe(0)
	} else {
		s.m.waiting.Inc()
	}
	s.m.locks.Set(float64(s.table.Locks()))
	if in, ok := s.table.Session(now, c.id); ok {
		typ := EventQueued
		if st.Held {
			typ = EventGranted
		}
		s.eventLocked(typ, in)
	}
	if c.v3 != nil {
		c.wmu.Lock()
		c.appendStateV3(st, true)
		c.wmu.Unlock()
	} else {
		c.queueState(st)
	}
	s.wakeReaperLocked(now.Add(lease))
	return 0, "", true, false
}

// busyMessageLocked says why a NOWAIT claim on name may not hold at once.
// An exclusive claim's is version 1's, byte for byte. mu must be held.
func (s *Server) busyMessageLocked(name string, shared bool) string {
	if !shared {
		return fmt.Sprintf("lock %q is held", name)
	}
	holders, exclusive, waiters := s.table.Occupancy(name)
	limit, _ := s.table.Limit(name)
	switch {
	case exclusive:
		return fmt.Sprintf("lock %q is held by an exclusive claim", name)
	case waiters > 0:
		return fmt.Sprintf("lock %q has %d waiting, who go first", name, waiters)
	}
	return fmt.Sprintf("lock %q has no free slot: %d of %d held", name, holders, limit)
}

// takeReadErr returns c.readErr (see there) and clears it.
func (c *session) takeReadErr() error {
	err := c.readErr
	c.readErr = nil
	return err
}

// errEnded says that the server ended the session while its reader waited.
var errEnded = errors.New("session ended by the server")

// nextHeader waits for the next frame's header. Waiting for a frame's first
// byte has no deadline (silence is the lease's business). With an idle
// poller, a session with nothing to read parks instead: parked is then true
// and the caller must return without touching the connection.
func (c *session) nextHeader() (h wire.Header, parked bool, err error) {
	s := c.srv
	if len(c.extra) > 0 { // sent with the ACQUIRE (readFirst), or read by the poller's shard
		n := copy(c.hdr[:], c.extra)
		c.extra = c.extra[n:]
		h, err = c.finishHeader(n, nil, false)
		return h, false, err
	}
	if !c.poll.Bound() {
		h, err = c.readHeader(false)
		return h, false, err
	}
	var n int
	err = c.takeReadErr() // what the poller's read found before it started this reader
	switch {
	case err != nil:
	case !c.waited:
		c.waited = true
		n, err = c.firstWait()
	default:
		n, err = c.poll.TryRead(c.hdr[:])
	}
	if err == errWouldBlock {
		if s.poller.park(c) {
			return h, true, nil
		}
		if c.closing.Load() {
			return h, false, errEnded
		}
		n, err = c.conn.Read(c.hdr[:])
	}
	h, err = c.finishHeader(n, err, false)
	return h, false, err
}

// firstWait waits for the session's first frame after ACQUIRE in Go's
// runtime poller, for at most Config.ParkAfter (see there), and then reads
// without waiting: errWouldBlock if the session is still idle and should
// park.
func (c *session) firstWait() (int, error) {
	after := c.srv.cfg.ParkAfter
	if after <= 0 {
		return 0, errWouldBlock
	}
	c.conn.SetReadDeadline(time.Now().Add(after))
	n, err := c.conn.Read(c.hdr[:])
	idle := err != nil && ioCause(err) == os.ErrDeadlineExceeded
	if err == nil || idle {
		// A later blocking read (drain's among them) must not inherit the
		// deadline. If the server ended the session meanwhile, clearing
		// halfClose's deadline is harmless: drain sets it again.
		c.conn.SetReadDeadline(time.Time{})
	}
	if !idle {
		return n, err // a frame, or the client's close or reset
	}
	if c.closing.Load() {
		return 0, errEnded
	}
	return c.poll.TryRead(c.hdr[:]) // idle: park, unless something came just now
}

// readHeader reads one frame header. Once its first byte has arrived, the
// rest of the frame must follow within io-timeout. For the first frame the
// caller has set the deadline already; for the others there is none while
// the first byte is awaited.
func (c *session) readHeader(first bool) (wire.Header, error) {
	n, err := c.conn.Read(c.hdr[:])
	return c.finishHeader(n, err, first)
}

// finishHeader completes a header of which a read got n bytes (or err).
func (c *session) finishHeader(n int, err error, first bool) (wire.Header, error) {
	if err != nil {
		return wire.Header{}, err
	}
	if n < len(c.hdr) {
		if !first {
			c.conn.SetReadDeadline(time.Now().Add(c.srv.cfg.IOTimeout))
		}
		if _, err := io.ReadFull(c.conn, c.hdr[n:]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return wire.Header{}, err
		}
		if !first {
			c.conn.SetReadDeadline(time.Time{})
		}
	}
	return wire.ParseHeader(c.hdr[:])
}

// readFailure classifies a failed read. It ends every session, so it looks
// through the errors the reads return by type, not by errors.As and
// errors.Is, which go through reflection.
func (c *session) readFailure(err error, first bool) (EndReason, string) {
	err = ioCause(err)
	if we, ok := err.(*wire.Error); ok {
		return ReasonProtocolError, we.Msg
	}
	switch err {
	case os.ErrDeadlineExceeded:
		if first {
			return ReasonReadTimeout, fmt.Sprintf("no complete ACQUIRE within io-timeout (%v)", c.srv.cfg.IOTimeout)
		}
		return ReasonReadTimeout, fmt.Sprintf("frame not completed within io-timeout (%v)", c.srv.cfg.IOTimeout)
	case io.EOF, io.ErrUnexpectedEOF, net.ErrClosed:
		return ReasonClosed, ""
	}
	return ReasonReset, ""
}

// ioCause unwraps what net and os wrap around the cause of a failed read or
// write: *net.OpError and *os.SyscallError (and TLS's wrapping of those, by
// the general Unwrap, off the plain TCP path).
func ioCause(err error) error {
	for {
		switch e := err.(type) {
		case *net.OpError:
			err = e.Err
		case *os.SyscallError:
			err = e.Err
		case *wire.Error, syscall.Errno:
			return err
		default:
			if err == os.ErrDeadlineExceeded || err == io.EOF || err == io.ErrUnexpectedEOF || err == net.ErrClosed {
				return err
			}
			if u := errors.Unwrap(err); u != nil {
				err = u
				continue
			}
			return err
		}
	}
}

// queueState queues the reply to a frame: ACQUIRED (same token) or WAITING.
// srv.mu must be held.
func (c *session) queueState(st locktable.State) {
	c.wmu.Lock()
	if c.v3 != nil {
		c.appendStateV3(st, false)
	} else if st.Held {
		c.out = wire.AppendAcquired(c.out, false, st.Token)
	} else {
		c.out = wire.AppendWaiting(c.out, uint32(st.Position))
	}
	c.wmu.Unlock()
}

// queueAcquired queues the promotion push; handoverAt is when the previous
// holder's session ended. srv.mu must be held.
func (c *session) queueAcquired(push bool, token uint64, handoverAt time.Time) {
	c.wmu.Lock()
	if c.v3 != nil {
		// A grant's credential: always with it.
		a := wire.Acquired{Push: push, Token: token}
		if cred, gen, ok := c.credentialIf(true, true, token); ok {
			a.WithCredential, a.Generation, a.Credential = true, gen, cred
		}
		c.out = wire.AppendAcquiredV3(c.out, a)
	} else {
		c.out = wire.AppendAcquired(c.out, push, token)
	}
	c.pushAt = handoverAt
	c.wmu.Unlock()
}

// queueError queues the session's last frame; after it is written the
// connection is half-closed. srv.mu must be held.
func (c *session) queueError(code wire.Code, msg string) {
	c.wmu.Lock()
	c.out = wire.AppendError(c.out, code, msg)
	c.finish = true
	c.wmu.Unlock()
}

// send writes what is queued: at once, without a deadline or a wait, when
// the socket takes it all (a reply or a push nearly always fits), and
// otherwise by flush.
func (c *session) send() {
	if !c.poll.Bound() || !c.writeNow() {
		c.flush()
	}
}

// flush writes what is queued, unless another goroutine already is (it will
// write this too). Each write must complete within io-timeout; one that
// does not ends the session without an ERROR.
func (c *session) flush() {
	c.wmu.Lock()
	if c.flushing || c.dead {
		c.wmu.Unlock()
		return
	}
	c.flushing = true
	for len(c.out) > 0 {
		buf := c.out
		c.out, c.spare = c.spare[:0], nil
		pushAt := c.pushAt
		c.pushAt = time.Time{}
		c.wmu.Unlock()

		c.conn.SetWriteDeadline(time.Now().Add(c.srv.cfg.IOTimeout))
		_, err := c.conn.Write(buf)
		if err == nil && !pushAt.IsZero() {
			c.srv.m.handoverTime.Observe(c.srv.now().Sub(pushAt).Seconds())
		}

		c.wmu.Lock()
		c.spare = buf[:0]
		if err != nil {
			c.dead = true
			c.flushing = false
			c.wmu.Unlock()
			c.writeFailed(err)
			return
		}
	}
	c.flushing = false
	finish := c.finish
	if finish {
		c.finish = false
		c.dead = true
	}
	c.wmu.Unlock()
	if finish {
		c.halfClose()
	}
}

// writeFailed ends the session after a failed write and closes the socket,
// which also wakes the reader.
func (c *session) writeFailed(err error) {
	reason := ReasonReset
	switch cause := ioCause(err); {
	case cause == os.ErrDeadlineExceeded:
		reason = ReasonWriteTimeout
	case cause == syscall.ECONNRESET || cause == syscall.EPIPE:
		// The client reset its socket: it closed, as far as a planned
		// handover's drain is concerned (the close then ends drain's read).
		c.markPeerGone()
	}
	s := c.srv
	// End first, close after: the reader, woken by the close, must find the
	// session ended for this reason rather than record it as closed.
	var fx effects
	s.mu.Lock()
	s.endOneLocked(s.now(), c, reason, "", &fx)
	s.mu.Unlock()
	s.deliver(&fx)
	if c.version == wire.Version3 {
		// The ERROR could not be written: a reset, never a clean end of
		// the stream, which a client of version 3 would take for its
		// server's going away (and resume).
		resetConn(c.conn)
		return
	}
	c.conn.Close()
}

// resetConn closes conn with a TCP reset (SO_LINGER 0) where it can reach
// the TCP connection under it, else closes it.
func resetConn(conn net.Conn) {
	for nc := conn; nc != nil; {
		switch x := nc.(type) {
		case *net.TCPConn:
			x.SetLinger(0)
			nc = nil
		case *tls.Conn:
			nc = x.NetConn()
		case interface{ Unwrap() net.Conn }:
			nc = x.Unwrap()
		default:
			setLingerZero(nc)
			nc = nil
		}
	}
	conn.Close()
}

// markPeerGone tells EndTerm's drain, if it waits for this session, that
// the client has closed its socket.
func (c *session) markPeerGone() {
	if c.peerGone != nil {
		c.peerGoneOnce.Do(func() { close(c.peerGone) })
	}
}

// halfClose follows the session's ERROR with a FIN and makes the reader stop
// within the linger time. Closing outright while client frames are unread
// would send a RST, which can destroy the ERROR before the client reads it.
func (c *session) halfClose() {
	if cw, ok := c.conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	until := time.Now().Add(c.srv.linger)
	c.wmu.Lock()
	c.lingerUntil = until
	c.wmu.Unlock()
	c.conn.SetReadDeadline(until)
}

// drain waits, after a session that ends with an ERROR, until the ERROR is
// written and the client has closed or the linger deadline set by halfClose
// has passed (a failed write closes the socket instead). What the client
// still sends is discarded unprocessed. srv.mu must have been taken since
// the session ended.
func (c *session) drain() {
	if c.reason.code() == 0 {
		return // the client left, or its socket failed: nothing to deliver
	}
	// The reader may have replaced or cleared halfClose's deadline while it
	// finished a frame begun before the ERROR (readHeader sets and clears
	// its own); without this, a client that then neither reads nor closes
	// would keep this goroutine forever. If halfClose has not run yet, it
	// sets the deadline itself: nothing clears it once the reader is here.
	c.wmu.Lock()
	until := c.lingerUntil
	c.wmu.Unlock()
	if !until.IsZero() {
		c.conn.SetReadDeadline(until)
	}
	var buf [256]byte
	for {
		if _, err := c.conn.Read(buf[:]); err != nil {
			// EOF or a reset: the client closed its socket (the clients
			// release by reset, and one may release just as the ERROR
			// comes), so it no longer believes it holds. See EndTerm.
			if err == io.EOF || errors.Is(err, syscall.ECONNRESET) {
				c.markPeerGone()
			}
			return
		}
	}
}
