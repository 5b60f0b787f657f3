package baton

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/server"
	"github.com/batonlock/baton/wire"
)

// These tests run the client against the real server over loopback TCP,
// with faults injected by internal/faultproxy. Real time: tolerances are
// wide, and no test asserts an exact sleep.

func newTestClient(t *testing.T, addrs []string, opts ...Option) *Client {
	t.Helper()
	c, err := New(addrs, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func newProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func acquire(t *testing.T, c *Client, name string, opts ...Option) *Lock {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, name, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", name, err)
	}
	t.Cleanup(func() { l.Release() })
	return l
}

// acquireLater starts an Acquire and returns once the server has it queued.
// At the end of the test the Acquire is cancelled and its lock released.
func acquireLater(t *testing.T, srv *server.Server, c *Client, name string, opts ...Option) <-chan acquireResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	lv, _ := srv.Lock(name)
	out := make(chan acquireResult, 1)
	finished := make(chan struct{})
	var res acquireResult
	go func() {
		defer close(finished)
		l, err := c.Acquire(ctx, name, opts...)
		res = acquireResult{l, err, time.Now()}
		out <- res
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
		if res.l != nil {
			res.l.Release()
		}
	})
	batontest.Eventually(t, 5*time.Second, func() bool {
		now, _ := srv.Lock(name)
		return len(now.Waiters) > len(lv.Waiters)
	}, "the waiter of %q is not queued", name)
	return out
}

// waitResult is acquireResult for real time.
func waitResult(t *testing.T, ch <-chan acquireResult, within time.Duration) acquireResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("Acquire did not return within %v", within)
		return acquireResult{}
	}
}

// grantedBy returns the current holder of name and a time no later than the
// server's grant to it: the server's own measure (Since), taken after before.
func grantedBy(t *testing.T, srv *server.Server, name string) (time.Time, server.SessionView) {
	t.Helper()
	before := time.Now()
	lv, ok := srv.Lock(name)
	if !ok || lv.Holder == nil {
		t.Fatalf("lock %q has no holder", name)
	}
	return before.Add(-lv.Holder.Since), *lv.Holder
}

// work is the outcome of a Do whose work waits for its context to end.
type work struct {
	token    uint64
	cancelAt time.Time // when the work saw its context end
	err      error     // what Do returned
}

// doUntilCancelled runs Do in the background; it returns once the lock is
// held, with a channel for the outcome.
func doUntilCancelled(t *testing.T, c *Client, name string, opts ...Option) (uint64, <-chan work) {
	t.Helper()
	held := make(chan uint64, 1)
	out := make(chan work, 1)
	go func() {
		var w work
		w.err = c.Do(context.Background(), name, func(ctx context.Context, l *Lock) error {
			w.token = l.Token()
			held <- l.Token()
			<-ctx.Done()
			w.cancelAt = time.Now()
			return context.Cause(ctx)
		}, opts...)
		out <- w
	}()
	select {
	case tok := <-held:
		return tok, out
	case w := <-out:
		t.Fatalf("Do: %v", w.err)
	case <-time.After(10 * time.Second):
		t.Fatalf("Do did not get the lock within 10s")
	}
	return 0, nil
}

func waitWork(t *testing.T, ch <-chan work, within time.Duration) work {
	t.Helper()
	select {
	case w := <-ch:
		return w
	case <-time.After(within):
		t.Fatalf("the work was not cancelled within %v", within)
		return work{}
	}
}

func TestIntegrationHandover(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	a := newTestClient(t, []string{srv.Addr}, WithOwner("a"))
	b := newTestClient(t, []string{srv.Addr}, WithOwner("b"))

	la := acquire(t, a, "jobs/nightly")
	ch := acquireLater(t, srv.Srv, b, "jobs/nightly")
	if _, err := b.Acquire(context.Background(), "jobs/nightly", WithNoWait(true)); !errors.Is(err, ErrBusy) {
		t.Errorf("try-lock of a held lock: %v, want ErrBusy", err)
	}
	time.Sleep(50 * time.Millisecond)
	releaseAt := time.Now()
	if err := la.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	r := waitResult(t, ch, 5*time.Second)
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	// The push, not the waiter's next heartbeat (2.5s away), hands it over.
	if d := r.at.Sub(releaseAt); d > 500*time.Millisecond {
		t.Errorf("handover took %v, want well under the heartbeat interval", d)
	}
	t.Logf("handover after Release: %v", r.at.Sub(releaseAt))
	if r.l.Token() <= la.Token() {
		t.Errorf("waiter's token %d, want more than the first holder's %d", r.l.Token(), la.Token())
	}
	_, hv := grantedBy(t, srv.Srv, "jobs/nightly")
	if hv.Owner != "b" || hv.Token != r.l.Token() || hv.Lease != DefaultLease {
		t.Errorf("server's holder %+v, want owner b, token %d, lease %v", hv, r.l.Token(), DefaultLease)
	}
}

// TestIntegrationHolderFaults freezes, in several ways, the link of a holder
// whose waiter is queued, and checks from timestamps that the holder's work
// was cancelled before the server granted the lock to the waiter.
func TestIntegrationHolderFaults(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	for _, tc := range []struct {
		name  string
		fault func(p *faultproxy.Proxy)
	}{
		// Nothing passes either way: the server moves the lock after a lease
		// of silence; the client gave up 0.2 × lease before.
		{"link frozen", func(p *faultproxy.Proxy) { p.Stall(faultproxy.Both) }},
		// The holder's process stops reading: heartbeats still reach the
		// server, which is content; replies pile up unread. The client must
		// not take a sent heartbeat for a confirmed one.
		{"holder stops reading", func(p *faultproxy.Proxy) { p.Stall(faultproxy.Down) }},
		// The holder's writes stall (its process paused, seen from the
		// server): silence on the server, no replies on the client.
		{"holder stops sending", func(p *faultproxy.Proxy) { p.Stall(faultproxy.Up) }},
		{"heartbeats lost", func(p *faultproxy.Proxy) { p.Drop(faultproxy.Up, true) }},
		{"replies lost", func(p *faultproxy.Proxy) { p.Drop(faultproxy.Down, true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := batontest.StartServer(t)
			px := newProxy(t, srv.Addr)
			holder := newTestClient(t, []string{px.Addr()}, WithLease(lease))
			waiter := newTestClient(t, []string{srv.Addr}, WithLease(lease))

			var mu sync.Mutex
			var lastUp time.Time // the last bytes the server could have seen
			px.SetTap(func(c faultproxy.Chunk) {
				if c.Dir == faultproxy.Up && !c.Dropped {
					mu.Lock()
					lastUp = c.Sent
					mu.Unlock()
				}
			})
			token, done := doUntilCancelled(t, holder, "res")
			ch := acquireLater(t, srv.Srv, waiter, "res")
			time.Sleep(lease / 2)

			faultAt := time.Now()
			tc.fault(px)
			w := waitWork(t, done, 5*time.Second)
			r := waitResult(t, ch, 5*time.Second)
			if r.err != nil {
				t.Fatalf("waiter: %v", r.err)
			}
			grantAt, hv := grantedBy(t, srv.Srv, "res")
			mu.Lock()
			silentFrom := lastUp
			mu.Unlock()

			if !w.cancelAt.Before(grantAt) {
				t.Errorf("holder's work cancelled at +%v, server granted the lock at +%v: want the cancel first",
					w.cancelAt.Sub(faultAt), grantAt.Sub(faultAt))
			}
			// The client gives up 0.8 × lease after its last confirmed
			// request, which was at most a heartbeat before the fault.
			if d := w.cancelAt.Sub(faultAt); d < lease*8/10-lease/4-10*time.Millisecond || d > lease*8/10+200*time.Millisecond {
				t.Errorf("work cancelled %v after the fault, want 0.8 × lease (%v) less up to lease/4", d, lease*8/10)
			}
			if !errors.Is(w.err, ErrLockLost) || !errors.Is(w.err, ErrUnconfirmed) {
				t.Errorf("Do: %v, want ErrLockLost and ErrUnconfirmed", w.err)
			}
			if hv.Token <= token || r.l.Token() != hv.Token {
				t.Errorf("waiter's token %d (server: %d), want more than the holder's %d", r.l.Token(), hv.Token, token)
			}
			t.Logf("%s: fault +0; holder cancelled +%v; server granted +%v (cancel %v ahead); last bytes to the server +%v",
				tc.name, w.cancelAt.Sub(faultAt).Round(time.Millisecond), grantAt.Sub(faultAt).Round(time.Millisecond),
				grantAt.Sub(w.cancelAt).Round(time.Microsecond), silentFrom.Sub(faultAt).Round(time.Millisecond))
		})
	}
}

// TestIntegrationReset: a reset connection is a loss reported at once, and
// the server hands the lock over at once.
func TestIntegrationReset(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	px := newProxy(t, srv.Addr)
	holder := newTestClient(t, []string{px.Addr()})
	waiter := newTestClient(t, []string{srv.Addr})
	_, done := doUntilCancelled(t, holder, "res")
	ch := acquireLater(t, srv.Srv, waiter, "res")
	resetAt := time.Now()
	px.Reset()
	w := waitWork(t, done, 5*time.Second)
	if !errors.Is(w.err, ErrLockLost) || errors.Is(w.err, ErrUnconfirmed) {
		t.Errorf("Do: %v, want ErrLockLost from the broken connection", w.err)
	}
	r := waitResult(t, ch, 5*time.Second)
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if d := r.at.Sub(resetAt); d > time.Second {
		t.Errorf("handover after a reset took %v, want at once", d)
	}
}

// TestIntegrationHeartbeatFigures checks the heartbeat schedule on links
// with added delay, from timestamps taken at the proxy: each request's round
// trip (write to reply) feeds an EWMA as the client's does, and every
// heartbeat must leave clamp(lease/4 - 2×srtt, min, lease/4) after the
// previous reply, never before it (at most one in flight).
func TestIntegrationHeartbeatFigures(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	for _, tc := range []struct {
		oneWay time.Duration
		want   time.Duration // the nominal interval, for a round trip of 2 × oneWay
	}{
		{0, 250 * time.Millisecond},                     // lease/4
		{20 * time.Millisecond, 170 * time.Millisecond}, // 250 - 2×40
		{40 * time.Millisecond, 90 * time.Millisecond},  // 250 - 2×80
		{70 * time.Millisecond, minHeartbeatInterval},   // 250 - 2×140 < 0: the floor
	} {
		t.Run(tc.oneWay.String(), func(t *testing.T) {
			t.Parallel()
			srv := batontest.StartServer(t)
			px := newProxy(t, srv.Addr)
			px.SetDelay(faultproxy.Both, tc.oneWay)
			var mu sync.Mutex
			var sent, replied []time.Time // per request: the client's write, its reply's arrival
			px.SetTap(func(c faultproxy.Chunk) {
				mu.Lock()
				defer mu.Unlock()
				// One request in flight, one reply each: a chunk is a frame.
				if c.Dir == faultproxy.Up {
					sent = append(sent, c.Read)
				} else {
					replied = append(replied, c.Sent)
				}
			})
			c := newTestClient(t, []string{px.Addr()}, WithLease(lease))
			l := acquire(t, c, "hb")
			batontest.Eventually(t, 10*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(replied) >= 9
			}, "fewer than 8 heartbeats answered")
			if err := l.Release(); err != nil {
				t.Fatalf("Release: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()

			s := schedule{lease: lease}
			var worst time.Duration
			var intervals []time.Duration
			for k := 0; k+1 < len(sent) && k < len(replied); k++ {
				s.observe(replied[k].Sub(sent[k]))
				want := s.interval()
				got := sent[k+1].Sub(replied[k])
				intervals = append(intervals, got)
				if got < 0 {
					t.Errorf("request %d sent %v before the reply to request %d", k+2, -got, k+1)
				}
				if d := got - want; d < -3*time.Millisecond || d > 5*time.Millisecond {
					t.Errorf("heartbeat %d left %v after the previous reply, want %v (rtt %v, srtt %v)",
						k+1, got, want, replied[k].Sub(sent[k]), s.srtt)
				}
				worst = max(worst, got-want, want-got)
			}
			if last := intervals[len(intervals)-1]; last < tc.want-10*time.Millisecond || last > tc.want+10*time.Millisecond {
				t.Errorf("settled interval %v, want about %v", last, tc.want)
			}
			t.Logf("one-way delay %v, lease %v: srtt %v, interval %v (nominal %v), worst deviation from the schedule %v; intervals %v",
				tc.oneWay, lease, s.srtt.Round(100*time.Microsecond), intervals[len(intervals)-1].Round(100*time.Microsecond),
				tc.want, worst.Round(10*time.Microsecond), roundAll(intervals))
		})
	}
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// TestIntegrationLeaseShorterThanRTT: a client whose lease cannot be
// confirmed over its link never claims the lock.
func TestIntegrationLeaseShorterThanRTT(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	px := newProxy(t, srv.Addr)
	px.SetDelay(faultproxy.Both, 30*time.Millisecond) // rtt 60ms; timeout 0.8 × 40ms = 32ms
	c := newTestClient(t, []string{px.Addr()}, WithLease(40*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	l, err := c.Acquire(ctx, "slow")
	if err == nil {
		l.Release()
		t.Fatalf("Acquire over a link slower than the lease succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), ErrUnconfirmed.Error()) {
		t.Errorf("Acquire: %v, want context.DeadlineExceeded after %q", err, ErrUnconfirmed)
	}
	if n := px.Accepted(); n < 3 {
		t.Errorf("%d attempts, want several (a new place each time)", n)
	}
	t.Logf("%d attempts; %v", px.Accepted(), err)
	// Nothing is left behind: another client gets the lock.
	other := newTestClient(t, []string{srv.Addr})
	batontest.Eventually(t, 5*time.Second, func() bool {
		l, err := other.Acquire(context.Background(), "slow", WithNoWait(true))
		if err == nil {
			l.Release()
		}
		return err == nil
	}, "lock still held after the slow client gave up")
}

// TestIntegrationRTTRisesAboveLease: a holder whose link slows down past its
// lease gives the lock up itself, before the server hands it on.
func TestIntegrationRTTRisesAboveLease(t *testing.T) {
	t.Parallel()
	const lease = 200 * time.Millisecond
	srv := batontest.StartServer(t)
	px := newProxy(t, srv.Addr)
	holder := newTestClient(t, []string{px.Addr()}, WithLease(lease))
	waiter := newTestClient(t, []string{srv.Addr})
	_, done := doUntilCancelled(t, holder, "res")
	ch := acquireLater(t, srv.Srv, waiter, "res")
	px.SetDelay(faultproxy.Both, 100*time.Millisecond) // rtt 200ms > 0.8 × lease
	w := waitWork(t, done, 5*time.Second)
	r := waitResult(t, ch, 5*time.Second)
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	grantAt, _ := grantedBy(t, srv.Srv, "res")
	if !w.cancelAt.Before(grantAt) {
		t.Errorf("holder cancelled %v after the server's grant, want before", w.cancelAt.Sub(grantAt))
	}
	if !errors.Is(w.err, ErrUnconfirmed) {
		t.Errorf("Do: %v, want ErrUnconfirmed", w.err)
	}
}

func TestIntegrationRestartWhileHolding(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	c := newTestClient(t, []string{srv.Addr})
	token, done := doUntilCancelled(t, c, "res")
	srv.Restart(t)
	w := waitWork(t, done, 5*time.Second)
	if !errors.Is(w.err, ErrLockLost) || !errors.Is(w.err, ErrShutdown) {
		t.Errorf("Do: %v, want ErrLockLost and ErrShutdown", w.err)
	}
	var we *wire.Error
	if !errors.As(w.err, &we) || we.Code.Class() != wire.ClassServer {
		t.Errorf("Do: %v, want a *wire.Error of class server condition", w.err)
	}
	// The caller decides to try again; tokens keep rising across the restart.
	l := acquire(t, c, "res")
	if l.Token() <= token {
		t.Errorf("token after restart %d, want more than %d", l.Token(), token)
	}
}

func TestIntegrationRestartWhileWaiting(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	a := newTestClient(t, []string{srv.Addr})
	b := newTestClient(t, []string{srv.Addr})
	token, done := doUntilCancelled(t, a, "res")
	ch := acquireLater(t, srv.Srv, b, "res")
	srv.Restart(t)
	if w := waitWork(t, done, 5*time.Second); !errors.Is(w.err, ErrShutdown) {
		t.Errorf("holder: %v, want ErrShutdown", w.err)
	}
	// The waiter rides out the restart and takes a new place.
	r := waitResult(t, ch, 5*time.Second)
	if r.err != nil {
		t.Fatalf("waiter across a restart: %v", r.err)
	}
	if r.l.Token() <= token {
		t.Errorf("waiter's token %d, want more than %d", r.l.Token(), token)
	}
}

func TestIntegrationForceRelease(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	a := newTestClient(t, []string{srv.Addr})
	b := newTestClient(t, []string{srv.Addr})
	token, done := doUntilCancelled(t, a, "res")
	ch := acquireLater(t, srv.Srv, b, "res")
	if _, err := srv.Srv.ForceRelease("res"); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	w := waitWork(t, done, 2*time.Second)
	if !errors.Is(w.err, ErrLockLost) || !errors.Is(w.err, ErrForceReleased) {
		t.Errorf("Do: %v, want ErrLockLost and ErrForceReleased", w.err)
	}
	r := waitResult(t, ch, 2*time.Second)
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if r.l.Token() <= token {
		t.Errorf("waiter's token %d, want more than %d", r.l.Token(), token)
	}
}

func TestIntegrationKick(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	a := newTestClient(t, []string{srv.Addr})
	b := newTestClient(t, []string{srv.Addr})
	acquire(t, a, "res")
	ch := acquireLater(t, srv.Srv, b, "res")
	lv, _ := srv.Srv.Lock("res")
	if _, err := srv.Srv.Kick(lv.Waiters[0].ID); err != nil {
		t.Fatalf("Kick: %v", err)
	}
	r := waitResult(t, ch, 2*time.Second)
	if !errors.Is(r.err, ErrKicked) {
		t.Fatalf("Acquire: %v, want ErrKicked", r.err)
	}
	// Not retried: the operator's decision stands.
	time.Sleep(100 * time.Millisecond)
	if lv, _ := srv.Srv.Lock("res"); len(lv.Waiters) != 0 {
		t.Errorf("%d waiters after the kick, want 0", len(lv.Waiters))
	}
}

// TestIntegrationOverloaded: a waiter refused by a server limit backs off and
// tries again until there is room.
func TestIntegrationOverloaded(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t, func(c *server.Config) { c.MaxSessions = 1 })
	a := newTestClient(t, []string{srv.Addr})
	b := newTestClient(t, []string{srv.Addr})
	la := acquire(t, a, "res")
	start := time.Now()
	ch := goAcquire(context.Background(), b, "res")
	time.Sleep(300 * time.Millisecond)
	la.Release()
	r := waitResult(t, ch, 5*time.Second)
	if r.err != nil {
		t.Fatalf("Acquire after OVERLOADED: %v", r.err)
	}
	defer r.l.Release()
	if d := r.at.Sub(start); d < 300*time.Millisecond || d > 300*time.Millisecond+backoffCap {
		t.Errorf("acquired after %v, want after the release (300ms) within a capped backoff", d)
	}
}

// TestIntegrationAddresses: a dead address is skipped, and is not tried first
// again; with no address alive, Acquire fails at once.
func TestIntegrationAddresses(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	dead := deadAddr(t)
	c := newTestClient(t, []string{dead, srv.Addr})
	l := acquire(t, c, "res")
	l.Release()
	if got := c.last.Load(); got != 1 {
		t.Errorf("preferred address %d, want 1", got)
	}

	c = newTestClient(t, []string{dead, deadAddr(t)})
	start := time.Now()
	_, err := c.Acquire(context.Background(), "res")
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Acquire with no server: %v, want connection refused", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Acquire with no server took %v, want at once", d)
	}
}

func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestIntegrationGoroutinesEndWithLock: a lost lock's goroutines end without
// Release being called.
func TestIntegrationGoroutinesEndWithLock(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	c := newTestClient(t, []string{srv.Addr})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "res")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Srv.ForceRelease("res"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.s.done:
	case <-time.After(2 * time.Second):
		t.Fatalf("the lock's goroutines still run 2s after its loss")
	}
}
