package reliability

import (
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/faultproxy"
)

// Faults of a holder, with real processes: `baton serve`, and `baton run`
// holders and waiters whose commands print "start TOKEN PID" when they get
// the lock. Each test checks the two promises: the holders never overlap
// (the next one starts only once the old one is gone or its lease has
// passed, and with a larger token) and the waiter gets the lock as soon as
// the rules allow.

// TestHolderKill9HandsOverAtOnce: a holder killed with kill -9 hands the
// lock over at once (its kernel closes the connection), not after its
// lease, and its command dies with it.
func TestHolderKill9HandsOverAtOnce(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	const lease = 30 * time.Second // the handover must not wait for it
	holder := startRunner(t, srv.Addr, "k9", lease, startScript("exec sleep 600"))
	_, tok1, pid1 := holder.started(t, eventWait)
	waiter := startRunner(t, srv.Addr, "k9", lease, startScript("exit 0"))
	srv.waitWaiters(t, "k9", 1)

	killedAt := time.Now()
	holder.Signal(t, syscall.SIGKILL)
	l, tok2, _ := waiter.started(t, eventWait)
	if d := l.at.Sub(killedAt); d > promptly {
		t.Errorf("waiter's command started %v after the kill, want at once (well under %v; the lease is %v)", d, promptly, lease)
	}
	if tok2 <= tok1 {
		t.Errorf("waiter's token %d, want more than the killed holder's %d", tok2, tok1)
	}
	if code := waiter.Wait(t, eventWait); code != 0 {
		t.Errorf("waiter exited %d, want its command's 0", code)
	}
	batontest.Eventually(t, eventWait, func() bool { return processGone(pid1) }, "the killed holder's command %d still runs", pid1)
	t.Logf("kill -9 of the holder: next command started %v later", l.at.Sub(killedAt).Round(time.Millisecond))
}

// TestHolderPausedPastLease: a holder (baton run and its command) stopped
// with SIGSTOP longer than its lease loses the lock: the waiter gets it
// once the lease has passed, not before; resumed with SIGCONT, the holder
// finds the lock lost, stops its command and exits 77.
func TestHolderPausedPastLease(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	const lease = 500 * time.Millisecond
	holder := startRunner(t, srv.Addr, "pause", lease, startScript("exec sleep 600"))
	_, tok1, pid1 := holder.started(t, eventWait)
	waiter := startRunner(t, srv.Addr, "pause", lease, startScript("exit 0"))
	srv.waitWaiters(t, "pause", 1)

	stoppedAt := time.Now()
	holder.Signal(t, syscall.SIGSTOP)
	syscall.Kill(-pid1, syscall.SIGSTOP) // the work too: the whole machine paused
	l, tok2, _ := waiter.started(t, lease+eventWait)
	// The holder's last heartbeat reached the server at most a heartbeat
	// interval (lease/4) before the stop.
	if d := l.at.Sub(stoppedAt); d < lease*3/4 {
		t.Errorf("waiter started %v after the holder stopped, want no earlier than its lease %v less a heartbeat interval", d, lease)
	}
	if tok2 <= tok1 {
		t.Errorf("waiter's token %d, want more than the paused holder's %d", tok2, tok1)
	}
	time.Sleep(lease) // the holder stays paused well past its lease
	resumedAt := time.Now()
	syscall.Kill(-pid1, syscall.SIGCONT)
	holder.Signal(t, syscall.SIGCONT)
	if code := holder.Wait(t, eventWait); code != 77 {
		t.Errorf("resumed holder exited %d, want 77 (lock lost); stderr:\n%s", code, holder.stderr)
	}
	batontest.Eventually(t, eventWait, func() bool { return processGone(pid1) }, "the paused holder's command %d still runs after the loss", pid1)
	t.Logf("SIGSTOP: waiter started %v after the stop; resumed holder exited 77 %v after SIGCONT",
		l.at.Sub(stoppedAt).Round(time.Millisecond), holder.ExitedAt.Sub(resumedAt).Round(time.Millisecond))
}

// TestHolderLinkFrozen: the holder's link is frozen both ways by a TCP
// proxy: the holder gives up (exit 77, command stopped) and the waiter gets
// the lock once the holder's lease has passed on the server, not before.
func TestHolderLinkFrozen(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	px := newProxy(t, srv.Addr)
	const lease = 500 * time.Millisecond
	holder := startRunner(t, px.Addr(), "frozen", lease, startScript("exec sleep 600"))
	_, tok1, pid1 := holder.started(t, eventWait)
	waiter := startRunner(t, srv.Addr, "frozen", lease, startScript("exit 0"))
	srv.waitWaiters(t, "frozen", 1)

	frozeAt := time.Now()
	px.Stall(faultproxy.Both)
	l, tok2, _ := waiter.started(t, lease+eventWait)
	if d := l.at.Sub(frozeAt); d < lease*3/4 {
		t.Errorf("waiter started %v after the freeze, want no earlier than the lease %v less a heartbeat interval", d, lease)
	}
	if tok2 <= tok1 {
		t.Errorf("waiter's token %d, want more than the frozen holder's %d", tok2, tok1)
	}
	if code := holder.Wait(t, eventWait); code != 77 {
		t.Errorf("frozen holder exited %d, want 77 (lock lost); stderr:\n%s", code, holder.stderr)
	}
	batontest.Eventually(t, eventWait, func() bool { return processGone(pid1) }, "the frozen holder's command %d still runs", pid1)
	t.Logf("link frozen: holder exited 77 at +%v, waiter started at +%v",
		holder.ExitedAt.Sub(frozeAt).Round(time.Millisecond), l.at.Sub(frozeAt).Round(time.Millisecond))
}

// TestHalfOpen: a peer vanishes without FIN or RST reaching the server
// (killed behind a proxy that holds everything, closes included). A
// holder's lock moves on after its lease of silence; a dead waiter leaves
// the queue after its lease, so it is never promoted in place of a live one.
func TestHalfOpen(t *testing.T) {
	t.Parallel()
	t.Run("holder", func(t *testing.T) {
		t.Parallel()
		srv := startServer(t, t.TempDir())
		px := newProxy(t, srv.Addr)
		const lease = 500 * time.Millisecond
		holder := startRunner(t, px.Addr(), "half", lease, startScript("exec sleep 600"))
		_, tok1, _ := holder.started(t, eventWait)
		waiter := startRunner(t, srv.Addr, "half", lease, startScript("exit 0"))
		srv.waitWaiters(t, "half", 1)

		goneAt := time.Now()
		px.Stall(faultproxy.Both)
		holder.Signal(t, syscall.SIGKILL)
		holder.Wait(t, eventWait)
		l, tok2, _ := waiter.started(t, lease+eventWait)
		if d := l.at.Sub(goneAt); d < lease*3/4 {
			t.Errorf("waiter started %v after the holder vanished, want no earlier than the lease %v less a heartbeat interval (no FIN reached the server)", d, lease)
		}
		if tok2 <= tok1 {
			t.Errorf("waiter's token %d, want more than the vanished holder's %d", tok2, tok1)
		}
		if n := srv.metric(t, `baton_lease_expiries_total{state="holding"}`); n != 1 {
			t.Errorf("holder lease expiries %v, want 1: the server must have ended the session by its lease", n)
		}
		t.Logf("half-open holder: lock moved %v after it vanished (lease %v)", l.at.Sub(goneAt).Round(time.Millisecond), lease)
	})
	t.Run("waiter", func(t *testing.T) {
		t.Parallel()
		srv := startServer(t, t.TempDir())
		px := newProxy(t, srv.Addr)
		h, tok := hold(t, srv.Addr, "half-w", time.Minute)
		const deadLease = 300 * time.Millisecond
		dead := dialRaw(t, px.Addr())
		dead.send(t, acquireFrame(t, "half-w", deadLease, false))
		if f := dead.expect(t, eventWait); f.typ != wire.TypeWaiting || f.pos != 1 {
			t.Fatalf("dead-to-be waiter: got %v, want WAITING 1", f)
		}
		live := queue(t, srv.Addr, "half-w", time.Minute, 2)
		px.Stall(faultproxy.Both)
		dead.Close() // vanishes: its FIN stays in the proxy
		srv.waitWaiters(t, "half-w", 1)
		h.expectHolds(t, tok)
		h.Close()
		if tok2 := live.expectPush(t, eventWait); tok2 <= tok {
			t.Errorf("live waiter's token %d, want more than %d", tok2, tok)
		}
		if n := srv.metric(t, `baton_lease_expiries_total{state="waiting"}`); n != 1 {
			t.Errorf("waiter lease expiries %v, want 1", n)
		}
	})
}

// TestSlowReader: a holder that sends heartbeats and never reads the
// replies fills the server's send buffer; the server's write times out at
// io-timeout and ends that session only. Its waiter gets the lock; another
// holder keeps its lock and its heartbeats are answered meanwhile.
func TestSlowReader(t *testing.T) {
	t.Parallel()
	const ioTimeout = 300 * time.Millisecond
	srv := startServer(t, t.TempDir(), "-io-timeout="+ioTimeout.String())
	other, otherTok := hold(t, srv.Addr, "other", time.Minute)

	d := net.Dialer{Timeout: eventWait, Control: smallReceiveBuffer}
	nc, err := d.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	slow := &rawConn{nc}
	t.Cleanup(func() { nc.Close() })
	slow.send(t, acquireFrame(t, "slow", time.Minute, false))
	if f := slow.expect(t, eventWait); f.typ != wire.TypeAcquired {
		t.Fatalf("slow reader: got %v, want ACQUIRED", f)
	}
	waiter := queue(t, srv.Addr, "slow", time.Minute, 1)

	// Heartbeats in batches, never reading, until the server ends it.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		batch := make([]byte, 0, 3*1024)
		for range 1024 {
			batch = wire.AppendHeartbeat(batch)
		}
		for {
			nc.SetWriteDeadline(time.Now().Add(2 * eventWait))
			if _, err := nc.Write(batch); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { nc.Close(); wg.Wait() })

	began := time.Now()
	for range 5 { // meanwhile, other sessions are served
		other.expectHolds(t, otherTok)
	}
	// The server's send buffer is bounded (-send-buffer, 16 KiB), so its
	// writes block after a few thousand replies; the wide bound is for a
	// loaded machine under -race.
	tok := waiter.expectPush(t, 6*eventWait)
	t.Logf("slow reader: ended and its lock moved %v after it stopped reading", time.Since(began).Round(time.Millisecond))
	// By its stuck write, as a rule; on a loaded machine its own writes
	// can stall mid-frame first, and the read's io-timeout ends it.
	ended := func() (w, r float64) {
		return srv.metric(t, `baton_sessions_ended_total{reason="write_timeout"}`),
			srv.metric(t, `baton_sessions_ended_total{reason="read_timeout"}`)
	}
	batontest.Eventually(t, eventWait, func() bool { w, r := ended(); return w+r == 1 },
		"want the slow reader, and only it, ended at io-timeout; write and read timeouts: %v", fmt.Sprint(ended()))
	other.expectHolds(t, otherTok)
	waiter.expectHolds(t, tok)
}

// TestByteASecondWriter: a peer that sends one byte a second is cut at
// io-timeout: before its first frame is complete, and in the middle of a
// heartbeat while it holds a lock with a long lease (the lock then moves to
// the waiter at once, not after the lease).
func TestByteASecondWriter(t *testing.T) {
	t.Parallel()
	const ioTimeout = 300 * time.Millisecond
	srv := startServer(t, t.TempDir(), "-io-timeout="+ioTimeout.String())

	t.Run("first frame", func(t *testing.T) {
		dialing := time.Now() // the server's accept, and its deadline, come after
		c := dialRaw(t, srv.Addr)
		trickle(t, c, acquireFrame(t, "trickle", time.Minute, false))
		closedAt := c.expectClosed(t, ioTimeout+eventWait)
		if d := closedAt.Sub(dialing); d < ioTimeout || d > ioTimeout+promptly {
			t.Errorf("cut %v after connecting, want about the io-timeout %v", d, ioTimeout)
		}
	})
	t.Run("holder mid-frame", func(t *testing.T) {
		h, tok := hold(t, srv.Addr, "trickle", time.Minute)
		w := queue(t, srv.Addr, "trickle", time.Minute, 1)
		began := time.Now()
		trickle(t, h, wire.AppendHeartbeat(nil))
		tok2 := w.expectPush(t, ioTimeout+eventWait)
		if d := time.Since(began); d < ioTimeout || d > ioTimeout+promptly {
			t.Errorf("lock moved %v after the first byte, want about the io-timeout %v (the lease is a minute)", d, ioTimeout)
		}
		if tok2 <= tok {
			t.Errorf("waiter's token %d, want more than %d", tok2, tok)
		}
		h.expectClosed(t, eventWait)
	})
	if n := srv.metric(t, `baton_sessions_ended_total{reason="read_timeout"}`); n != 2 {
		t.Errorf("read timeouts %v, want 2", n)
	}
}

// trickle sends b one byte a second from a goroutine that ends when a write
// fails (the server cut the connection) or the test ends.
func trickle(t *testing.T, c *rawConn, b []byte) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range b {
			if _, err := c.Write(b[i : i+1]); err != nil {
				return
			}
			select {
			case <-done:
				return
			case <-time.After(time.Second):
			}
		}
	}()
	t.Cleanup(func() { close(done); wg.Wait() })
}

// smallReceiveBuffer makes the kernel's receive buffer as small as it
// allows, so that a client that does not read blocks the server soon.
func smallReceiveBuffer(network, address string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024)
	})
	if err != nil {
		return err
	}
	return serr
}

// newProxy starts a fault proxy in front of target; t.Cleanup closes it.
func newProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	px, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	return px
}
