package clienttest

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/server"
	"go.uber.org/goleak"
)

// These tests run the client against the real server over loopback TCP,
// with faults injected by internal/faultproxy. Real time: tolerances are
// wide, and no test asserts an exact sleep.

func newTestClient(t *testing.T, addrs []string, opts ...baton.Option) *baton.Client {
	t.Helper()
	c, err := baton.New(addrs, opts...)
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

func acquire(t *testing.T, c *baton.Client, name string, opts ...baton.Option) *baton.Lock {
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
func acquireLater(t *testing.T, srv *server.Server, c *baton.Client, name string, opts ...baton.Option) <-chan acquireResult {
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

// acquireResult is what an Acquire run in the background returned, and when.
type acquireResult struct {
	l   *baton.Lock
	err error
	at  time.Time
}

func goAcquire(ctx context.Context, c *baton.Client, name string, opts ...baton.Option) <-chan acquireResult {
	ch := make(chan acquireResult, 1)
	go func() {
		l, err := c.Acquire(ctx, name, opts...)
		ch <- acquireResult{l, err, time.Now()}
	}()
	return ch
}

// work is the outcome of a Do whose work waits for its context to end.
type work struct {
	token    uint64
	cancelAt time.Time // when the work saw its context end
	// deadline is the last ValidUntil the work read while it held the
	// lock: the instant the client's clock ends the claim when no
	// confirmation comes, at which the session cancels the work and then
	// closes the connection.
	deadline time.Time
	err      error // what Do returned
}

// doUntilCancelled runs Do in the background; it returns once the lock is
// held, with a channel for the outcome.
func doUntilCancelled(t *testing.T, c *baton.Client, name string, opts ...baton.Option) (uint64, <-chan work) {
	t.Helper()
	held := make(chan uint64, 1)
	out := make(chan work, 1)
	go func() {
		var w work
		w.err = c.Do(context.Background(), name, func(ctx context.Context, l *baton.Lock) error {
			w.token = l.Token()
			held <- l.Token()
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for {
				if v := l.ValidUntil(); !v.IsZero() {
					w.deadline = v
				}
				select {
				case <-ctx.Done():
					w.cancelAt = time.Now()
					return context.Cause(ctx)
				case <-tick.C:
				}
			}
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
	a := newTestClient(t, []string{srv.Addr}, baton.WithOwner("a"))
	b := newTestClient(t, []string{srv.Addr}, baton.WithOwner("b"))

	la := acquire(t, a, "jobs/nightly")
	ch := acquireLater(t, srv.Srv, b, "jobs/nightly")
	if _, err := b.Acquire(context.Background(), "jobs/nightly", baton.WithNoWait(true)); !errors.Is(err, baton.ErrBusy) {
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
	if hv.Owner != "b" || hv.Token != r.l.Token() || hv.Lease != baton.DefaultLease {
		t.Errorf("server's holder %+v, want owner b, token %d, lease %v", hv, r.l.Token(), baton.DefaultLease)
	}
}

func TestIntegrationRestartWhileHolding(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	// Versions 1 and 2: a restart ends the claim. Version 3 moves it.
	c := newTestClient(t, []string{srv.Addr}, baton.WithResume(false))
	token, done := doUntilCancelled(t, c, "res")
	srv.Restart(t)
	w := waitWork(t, done, 5*time.Second)
	if !errors.Is(w.err, baton.ErrLockLost) || !errors.Is(w.err, baton.ErrShutdown) {
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
	// Versions 1 and 2: a restart ends the claim. Version 3 moves it.
	a := newTestClient(t, []string{srv.Addr}, baton.WithResume(false))
	b := newTestClient(t, []string{srv.Addr}, baton.WithResume(false))
	token, done := doUntilCancelled(t, a, "res")
	ch := acquireLater(t, srv.Srv, b, "res")
	srv.Restart(t)
	if w := waitWork(t, done, 5*time.Second); !errors.Is(w.err, baton.ErrShutdown) {
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
	if !errors.Is(w.err, baton.ErrLockLost) || !errors.Is(w.err, baton.ErrForceReleased) {
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
	if !errors.Is(r.err, baton.ErrKicked) {
		t.Fatalf("Acquire: %v, want ErrKicked", r.err)
	}
	// Not retried: the operator's decision stands.
	time.Sleep(100 * time.Millisecond)
	if lv, _ := srv.Srv.Lock("res"); len(lv.Waiters) != 0 {
		t.Errorf("%d waiters after the kick, want 0", len(lv.Waiters))
	}
}

// backoffCap is the longest wait of the client's backoff between attempts
// (2s, as the package documents).
const backoffCap = 2 * time.Second

// TestIntegrationOverloaded: a waiter refused by a server limit backs off and
// tries again until there is room.
func TestIntegrationOverloaded(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t, func(c *server.Config) { c.MaxSessions = 1 })
	a := newTestClient(t, []string{srv.Addr})
	b := newTestClient(t, []string{srv.Addr})
	la := acquire(t, a, "res")
	ch := goAcquire(context.Background(), b, "res")
	// Refused twice: it backed off and tried again.
	batontest.Eventually(t, 5*time.Second, func() bool { return sessionRefusals(t, srv.Srv) >= 2 },
		"the waiter was not refused with OVERLOADED twice")
	releaseAt := time.Now()
	la.Release()
	r := waitResult(t, ch, 5*time.Second)
	if r.err != nil {
		t.Fatalf("Acquire after OVERLOADED: %v", r.err)
	}
	defer r.l.Release()
	if d := r.at.Sub(releaseAt); d < 0 || d > backoffCap {
		t.Errorf("acquired %v after the release, want after it within a capped backoff (%v)", d, backoffCap)
	}
}

// TestIntegrationAddresses: a dead address is skipped, and is not tried first
// again (a listener put on it afterwards sees no connection); with no
// address alive, Acquire fails at once.
func TestIntegrationAddresses(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	dead := deadAddr(t)
	c := newTestClient(t, []string{dead, srv.Addr})
	l := acquire(t, c, "res")
	l.Release()
	revived, err := net.Listen("tcp", dead)
	if err != nil {
		t.Fatalf("listen again on %s: %v", dead, err)
	}
	accepted := make(chan int, 1) // how many connections it saw, once it is closed
	go func() {
		n := 0
		for {
			conn, err := revived.Accept()
			if err != nil {
				accepted <- n
				return
			}
			n++
			conn.Close() // no server here: the client moves on
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	l, err = c.Acquire(ctx, "res")
	cancel()
	if err == nil {
		l.Release()
	}
	revived.Close()
	if n := <-accepted; n != 0 || err != nil {
		t.Errorf("second Acquire: %v, after %d connections to %s; want the lock from %s, the address that last answered, dialled first",
			err, n, dead, srv.Addr)
	}

	c = newTestClient(t, []string{dead, deadAddr(t)})
	start := time.Now()
	_, err = c.Acquire(context.Background(), "res")
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
// Release being called. Not parallel: every goroutine that was not there
// before the lock, once the server has started the ones it keeps, must end.
func TestIntegrationGoroutinesEndWithLock(t *testing.T) {
	srv := batontest.StartServer(t)
	c := newTestClient(t, []string{srv.Addr})
	acquire(t, c, "warm-up").Release() // the server starts what it keeps running
	before := goleak.IgnoreCurrent()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "res")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Srv.ForceRelease("res"); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	for deadline := time.Now().Add(2 * time.Second); ; { // Find itself waits about 0.4s
		err := goleak.Find(before)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lock's goroutines still run 2s after its loss: %v", err)
		}
	}
}

// sessionRefusals reads baton_limit_refusals_total{limit="sessions"}.
func sessionRefusals(t *testing.T, srv *server.Server) float64 {
	t.Helper()
	mfs, err := srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "baton_limit_refusals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "limit" && lp.GetValue() == "sessions" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
