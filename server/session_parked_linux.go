package server

import (
	"io"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/server/internal/idlepoll"
	"golang.org/x/sys/unix"
)

// A session's parked path: what the idle poller's shards do with a
// session, on their goroutines, and how a session moves between them and
// a reader goroutine of its own. The poller itself (epoll, the parked
// set, the due list, the shards' loop, and who owns a session in each
// state) is server/internal/idlepoll; this file is the session's side.
//
// The poller serves sessions without goroutines of their own, so that a
// session costs no goroutine stack (two thirds of its memory) and a claim
// no goroutine start: a parked session has no reader goroutine, and its
// shard reads it when its connection becomes readable, without waiting.
// A connection parks at its accept (accepted with accept4 by the listener's
// loop, so that Go's runtime poller never sees it unless a reader
// goroutine waits on it: see accept_raw_linux.go). Its shard takes the
// ACQUIRE, when it came whole in one read (answerFirst); answers its
// HEARTBEATs, pipelined ones too, a read of them a turn and at its pace
// (answerNext); and ends the session at the client's close or reset,
// writing the handover's push to the next holder (closeInShard). The
// reply is written without waiting, and the session stays parked.
// Anything else (a frame begun and not continued, another frame after the
// ACQUIRE, a lease NoteLease may have to wait for, a refusal, a reply the
// socket cannot take at once) gets a new reader goroutine, handed what
// was read (handOff); it parks the session again once idle, after its
// first wait (Config.ParkAfter). The server starts a reader too when it
// ends a parked session, which delivers the ERROR. An adopted connection
// that sends no whole ACQUIRE within io-timeout is handed to a reader at
// its due time, which ends it as a reader started at accept would
// (Overdue).
//
// A holder with waiters stays parked: its close wakes its shard through
// the same readiness that would wake a reader goroutine, and the shard
// writes the push at once, with no goroutine start and no epoll_ctl.
//
// Why not an event-loop library (gnet, nbio): they own every read and
// write of every connection, which would replace net.Conn, crypto/tls and
// the per-session code with theirs. Here a session keeps its net.Conn,
// and a reader goroutine with the ordinary blocking code takes over
// whenever the shard's fast path does not apply; TLS sessions never park.

// idlePoller is the server's idle poller: the shards, and the server's
// answers to them (idlepoll.Handler).
type idlePoller struct {
	srv *Server
	ep  *idlepoll.Poller[*session]
	// handOffs counts the readers started for woken sessions (for tests).
	handOffs atomic.Uint64
}

func newIdlePoller(s *Server) (*idlePoller, error) {
	p := &idlePoller{srv: s}
	ep, err := idlepoll.New[*session](p, idlepoll.Config{
		Shards:   runtime.GOMAXPROCS(0), // one per CPU; a session stays in one
		BufSize:  firstReadSize,
		Parked:   s.m.parked,
		MoreTurn: moreTurn,
		MorePace: morePace,
	})
	if err != nil {
		return nil, err
	}
	p.ep = ep
	return p, nil
}

// PollConn is c's part of the poller.
func (p *idlePoller) PollConn(c *session) *idlepoll.Conn[*session] { return &c.poll }

// MayPark is false once c's end has begun: ending a session sets
// c.closing before it asks the poller to unpark it, so either the end
// finds the session parked and wakes it, or the park sees the end; it
// never needs the server's mutex.
func (p *idlePoller) MayPark(c *session) bool { return !c.closing.Load() }

// Due is when an adopted session's ACQUIRE must be whole (adopt).
func (p *idlePoller) Due(c *session) time.Time { return c.firstDue }

// SetDue is idlepoll.Handler.SetDue: under the shard's mutex, before the
// shard can see c.
func (p *idlePoller) SetDue(c *session, due time.Time) { c.firstDue = due }

// Serve answers c, woken, on its shard's goroutine (answer), and starts
// its reader when the answer needs one.
func (p *idlePoller) Serve(c *session, ended bool) (again bool) {
	switch c.answer(ended) {
	case needReader:
		p.handOff(c, c.resume)
	case needWriter:
		p.handOff(c, c.flushResume)
	case readAgain:
		return true
	}
	return false
}

// Overdue gives the adopted sessions whose ACQUIRE has not come within
// io-timeout readers, which find their deadline passed and end them with
// READ_TIMEOUT, as a reader started at accept would. A session the shard
// is serving just now leaves the due list too; the shard gives it a
// reader when it finds it still without ACQUIRE (repark).
func (p *idlePoller) Overdue(late []*session) {
	s := p.srv
	s.mu.Lock()
	for _, c := range late {
		if !s.goLocked(c.resume) {
			c.conn.Close() // stopped: its end found it unparked already
		}
	}
	s.mu.Unlock()
}

// Abandon gives c, which its shard was reading at its pace when it
// stopped, its reader: the server has ended every session before it
// stops the poller, and the reader delivers that end.
func (p *idlePoller) Abandon(c *session) { p.handOff(c, c.resume) }

// park parks c and reports true, after which the caller (c's reader) must
// return without touching the connection. It reports false when c cannot
// be parked (not a plain TCP connection, the session has ended, or the
// poller is stopping); the reader then goes on reading.
func (p *idlePoller) park(c *session) bool {
	ok, err := p.ep.Park(c)
	if err != nil {
		p.srv.log.Warn("idle poller: cannot watch a connection; its reader stays", "remote", c.remote, "err", err)
	}
	return ok
}

// adopt parks new session c before its first frame, so that its shard
// reads the ACQUIRE and serves the session without a goroutine of its own,
// and reports true. False if it cannot (the poller is stopping, the
// session has ended, the descriptor cannot be watched): the caller then
// starts c's reader, which sets its due time itself.
func (p *idlePoller) adopt(c *session) bool {
	return p.ep.Adopt(c, p.srv.cfg.IOTimeout)
}

// unpark takes c, which the server ended, out of the poller if it is
// parked, and reports whether it was: the caller must then start c's
// reader. c.closing must be set already: a shard that takes c first (it
// was readable) finds the session ended and starts its reader itself; a
// reader that would park it sees closing and reads on.
func (p *idlePoller) unpark(c *session) bool { return p.ep.Unpark(c) }

// readersStarted is how many readers the shards started for woken sessions.
func (p *idlePoller) readersStarted() uint64 { return p.handOffs.Load() }

// isParked reports whether c is parked.
func (p *idlePoller) isParked(c *session) bool { return p.ep.IsParked(c) }

// run runs every shard, until stop. It is one of the server's goroutines;
// the other shards run in goroutines it starts, counted likewise.
func (p *idlePoller) run() {
	shards := p.ep.Shards()
	p.srv.wg.Add(len(shards) - 1) // the caller is counted: above zero
	for _, sh := range shards[1:] {
		go func() {
			defer p.srv.wg.Done()
			p.runShard(sh)
		}()
	}
	p.runShard(shards[0])
}

func (p *idlePoller) runShard(sh *idlepoll.Shard[*session]) {
	if err := sh.Run(); err != nil {
		p.srv.log.Error("idle poller: waiting on epoll failed; parked sessions are now woken only when the server ends them", "err", err)
	}
}

// stop makes run return and refuses new parks. Every session was unparked
// before (Shutdown ends them all first). A shard may be serving sessions
// meanwhile (taking srv.mu), so the caller must not hold srv.mu.
func (p *idlePoller) stop() { p.ep.Stop() }

// initRaw readies c for parking, if its connection gives its descriptor.
func (c *session) initRaw(raw syscall.RawConn) { c.srv.poller.ep.Bind(&c.poll, raw) }

// What answer did, and what its caller must do.
const (
	answered   = iota // c is parked again
	closed            // c has ended, and its connection is closed
	handedOff         // c has a reader goroutine already
	needReader        // c needs its reader goroutine
	needWriter        // the same, and the reader must first write what is queued
	parkAgain         // (answerFirst, answerNext) c may park again
	readAgain         // (answerNext) c has more unread, maybe: its shard reads it again in its next turn
)

// answer handles what woke parked session c, on its shard's goroutine and
// without waiting: the ACQUIRE of an adopted session (answerFirst); a lone
// HEARTBEAT, answered; the client's close or reset, the session's end
// (closeInShard). Otherwise the caller must start c's reader, to which
// answer leaves what it read. When the reply cannot be written at once,
// the reader writes it before it reads on (with the io-timeout), as a
// reader always does: a client that does not read its replies cannot make
// the server queue them.
//
// ended says that the event came with the client's close or reset (or a
// socket error): what came before it is answered, and then the socket is
// read once more, for the close. Edge-triggered, the shard is not told of
// the close again: parked with its close unread, a holder would keep its
// lock until its lease ran out.
func (c *session) answer(ended bool) int {
	for {
		var a int
		if c.started {
			a = c.answerNext()
		} else {
			a = c.answerFirst()
		}
		if a != parkAgain {
			return a // readAgain too: the close, if it came, is read after the frames
		}
		if !ended {
			return c.repark()
		}
		ended = false
	}
}

// pipelineRead is how much of a started session's socket its shard reads
// in a turn: whole HEARTBEATs (42), and more than one, so that a read
// that returns less has drained the socket.
const pipelineRead = firstReadSize / wire.HeaderSize * wire.HeaderSize

// answerNext reads a started session's socket and answers the HEARTBEATs
// it finds, or ends the session at the client's close or reset. Pipelined
// HEARTBEATs (a client may send many without waiting) are answered here
// too, a read of them a turn, in one hold of the server's mutex and one
// write: a session whose read filled the buffer, or ended inside a frame,
// is read again in a later turn of its shard (readAgain), at the shard's
// pace. So whatever one client sends, the others' heartbeats wait for at
// most moreTurn reads, and a flood costs no goroutine and no write per
// frame. A frame begun and not continued by the next turn goes to a
// reader goroutine, which waits for the rest within io-timeout.
func (c *session) answerNext() int {
	rbuf := c.poll.ShardBuf()
	have := copy(rbuf, c.extra) // a frame's first bytes, from the last turn
	c.extra = c.extra[:0]
	buf := rbuf[:pipelineRead]
	n, err := c.poll.TryRead(buf[have:])
	if err == errWouldBlock {
		if have == 0 {
			return parkAgain // a stale readiness
		}
		c.extra = append(c.extra, buf[:have]...)
		return needReader
	}
	if err == io.EOF || err == unix.ECONNRESET {
		if c.closeInShard(err) {
			return closed
		}
	}
	if err != nil {
		c.extra = append(c.extra, buf[:have]...)
		c.readErr = err
		return needReader
	}
	total := have + n
	whole := total / wire.HeaderSize * wire.HeaderSize
	if !heartbeatsOnly(buf[:whole]) {
		c.extra = append(c.extra, buf[:total]...) // nextHeader takes it first
		return needReader
	}
	if whole > 0 && !c.heartbeats(whole/wire.HeaderSize) {
		return needReader // the reader delivers the end
	}
	c.extra = append(c.extra, buf[whole:total]...)
	if !c.writeNow() {
		return needWriter // its reader then takes the frame begun first
	}
	if total == len(buf) || len(c.extra) > 0 {
		return readAgain
	}
	return parkAgain
}

// heartbeatsOnly reports whether b is whole HEARTBEAT frames, or nothing.
func heartbeatsOnly(b []byte) bool {
	if len(b)%wire.HeaderSize != 0 {
		return false
	}
	for i := 0; i < len(b); i += wire.HeaderSize {
		if wire.Type(b[i]) != wire.TypeHeartbeat || b[i+1]|b[i+2] != 0 {
			return false
		}
	}
	return true
}

// answerFirst takes the ACQUIRE of an adopted session, when it came whole
// in one read and nothing came after it (what clients send): the session
// enters the table, its answer is written without waiting, and it stays
// parked. Anything else goes to a reader goroutine, with what was read:
// a frame in parts, more than one frame, an error to report, a lease that
// noting would wait for (a disk write or a Raft round, which the shard must
// not wait for: see Replica.TryNoteLease), a refusal (its ERROR and linger).
func (c *session) answerFirst() int {
	buf := c.poll.ShardBuf()
	n, err := c.poll.TryRead(buf)
	if err == errWouldBlock { // a stale readiness
		return parkAgain
	}
	if err != nil {
		c.readErr = err
		return needReader
	}
	h, payload, used, serr := wire.Split(buf[:n])
	if serr != nil || used != n || n == len(buf) || h.Type != wire.TypeAcquire {
		c.extra = append([]byte(nil), buf[:n]...)
		return needReader
	}
	req, derr := wire.DecodeAcquireUpTo(payload, wire.Version3)
	if derr != nil || req.Resuming() {
		// A refusal, or a resume: a resume may wait (for the bound's
		// commit, for a server about to serve), which the shard must not.
		c.extra = append([]byte(nil), buf[:n]...)
		return needReader
	}
	c.started, c.waited = true, true
	reason, msg, ok, wouldWait := c.acquire(req, false)
	if wouldWait { // a reader takes the ACQUIRE again, and may wait
		c.started, c.waited = false, false
		c.extra = append([]byte(nil), buf[:n]...)
		return needReader
	}
	if !ok {
		c.srv.poller.handOff(c, func() { c.end(reason, msg) })
		return handedOff
	}
	if !c.writeNow() {
		return needWriter
	}
	return parkAgain
}

// closeInShard ends c, whose client closed or reset its connection (err),
// on its shard's goroutine: the handover's pushes are written without
// waiting (a new holder whose socket cannot take its push at once gets a
// flusher), and the connection is closed. False if the server ended c
// meanwhile: its reader must then deliver that end.
func (c *session) closeInShard(err error) bool {
	s := c.srv
	reason, _ := c.readFailure(err, false)
	s.mu.Lock()
	if c.ended {
		s.mu.Unlock()
		return false
	}
	fx := effects{flush: c.endFlush[:0], self: c}
	s.endOneLocked(s.now(), c, reason, "", &fx) // no ERROR: nothing for c
	s.mu.Unlock()
	s.deliver(&fx)
	s.poller.ep.Forget(c)
	c.conn.Close()
	s.m.connections.Dec()
	s.open.Add(-1)
	return true
}

// repark parks c again after its shard answered it, keeping its
// registration; needReader if it may not park, or if it still has no
// ACQUIRE and its due time has been swept (its reader ends it).
func (c *session) repark() int {
	if !c.srv.poller.ep.Repark(c, c.started) {
		return needReader
	}
	return answered
}

// handOff takes c, which its shard took out of the parked set, off the
// poller's books and starts a goroutine that runs f as c's reader.
func (p *idlePoller) handOff(c *session, f func()) {
	p.ep.Release(c)
	p.handOffs.Add(1)
	p.srv.wg.Add(1) // the shard's goroutine is counted: above zero
	go func() {
		defer p.srv.wg.Done()
		f()
	}()
}

// flushResume is the reader of a session whose answer the shard could not
// write at once: it writes it, then reads on.
func (c *session) flushResume() {
	c.flush()
	c.resume()
}

// writeNow writes c's queued output without waiting, and reports whether
// nothing is left for its reader: it all went out, or another goroutine is
// writing (it takes this too). False when the socket cannot take it all
// now, or the output ends the session: flush must finish it.
func (c *session) writeNow() bool {
	c.wmu.Lock()
	if c.flushing || c.dead || (len(c.out) == 0 && !c.finish) {
		c.wmu.Unlock()
		return true
	}
	if c.finish {
		c.wmu.Unlock()
		return false // flush half-closes after it
	}
	buf := c.out
	c.out, c.spare = c.spare[:0], nil
	pushAt := c.pushAt
	c.pushAt = time.Time{}
	c.flushing = true
	c.wmu.Unlock()

	// Writes are serialized by c.flushing, not by the descriptor's write
	// lock.
	n, err := c.poll.TryWrite(buf)

	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.flushing = false
	if err != nil || n < len(buf) {
		// Back in front of what was queued meanwhile; the reader's flush
		// writes it with a deadline and deals with any error.
		c.out = append(append([]byte(nil), buf[n:]...), c.out...)
		if !pushAt.IsZero() {
			c.pushAt = pushAt
		}
		return false
	}
	if !pushAt.IsZero() {
		c.srv.m.handoverTime.Observe(c.srv.now().Sub(pushAt).Seconds())
	}
	c.spare = buf[:0]
	return len(c.out) == 0 && !c.finish
}
