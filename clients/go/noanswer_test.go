package baton

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// recordLog keeps the records a logger was given.
type recordLog struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *recordLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordLog) WithGroup(string) slog.Handler      { return h }

// find returns the records with message msg, with their "addr" attribute.
func (h *recordLog) find(msg string) (levels []slog.Level, addrs []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.Message != msg {
			continue
		}
		levels = append(levels, r.Level)
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "addr" {
				addrs = append(addrs, a.Value.String())
			}
			return true
		})
	}
	return levels, addrs
}

// retryLog keeps what WithRetryFunc was told.
type retryLog struct {
	mu    sync.Mutex
	errs  []error
	waits []time.Duration
	at    []time.Time
}

func (l *retryLog) f(err error, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs, l.waits, l.at = append(l.errs, err), append(l.waits, wait), append(l.at, time.Now())
}

// TestNoAnswer: a server that accepts the connection and never answers is
// given up after the answer bound (5s with the default 10s lease, not
// 0.8 × lease), reported to the logger at Warn and to WithRetryFunc with
// ErrNoAnswer, tried again after a backoff on the next address, and named
// in the error when the caller's context ends: ErrNoAnswer beside
// DeadlineExceeded.
func TestNoAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, retries := &recordLog{}, &retryLog{}
		c, pn := newPipeClient(t, []string{"pipe:1", "pipe:2"}, WithLogger(slog.New(h)), WithRetryFunc(retries.f))
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
		defer cancel()
		ch := goAcquire(ctx, c, "jobs")
		var addrs []string
		go func() { // the silent servers: they read, and never answer
			for p := range pn.peers {
				addrs = append(addrs, p.addr)
			}
		}()
		r := result(t, ch)
		close(pn.peers)
		synctest.Wait()
		if r.l != nil {
			r.l.Release()
			t.Fatal("Acquire succeeded with no server answering")
		}
		if !errors.Is(r.err, context.DeadlineExceeded) || !errors.Is(r.err, ErrNoAnswer) || errors.Is(r.err, ErrUnconfirmed) {
			t.Errorf("Acquire: %v, want DeadlineExceeded and ErrNoAnswer (not ErrUnconfirmed: 5s is under 0.8 × lease)", r.err)
		}
		if IsRetryable(r.err) {
			t.Errorf("IsRetryable(%v) = true: the caller's own context ended", r.err)
		}
		retries.mu.Lock()
		defer retries.mu.Unlock()
		if len(retries.errs) != 2 {
			t.Fatalf("%d retries reported (%v), want 2 in 12s (at 5s and about 10s)", len(retries.errs), retries.errs)
		}
		for i, err := range retries.errs {
			if !errors.Is(err, ErrNoAnswer) || !IsRetryable(err) || retries.waits[i] <= 0 {
				t.Errorf("retry %d: %v after %v; want a retryable ErrNoAnswer and a backoff", i, err, retries.waits[i])
			}
		}
		if got, want := retries.at[0].Sub(start), answerTimeout; got != want {
			t.Errorf("first retry at %v, want at the answer bound %v", got, want)
		}
		if want := "no answer from pipe:1 in 5s"; retries.errs[0].Error() != want {
			t.Errorf("first retry's error %q, want %q", retries.errs[0], want)
		}
		if want := []string{"pipe:1", "pipe:2", "pipe:1"}; strings.Join(addrs, ",") != strings.Join(want, ",") {
			t.Errorf("dialled %q, want %q: the next address after a silent one", addrs, want)
		}
		levels, logged := h.find("baton: no answer from the server; trying again")
		if len(levels) != 2 || levels[0] != slog.LevelWarn || logged[0] != "pipe:1" || logged[1] != "pipe:2" {
			t.Errorf("log: %v at %v, want two Warn records naming pipe:1 then pipe:2", logged, levels)
		}
	})
}

// TestNoAnswerShortLease: with a lease under 6.25s, 0.8 × lease bounds the
// wait; the error says both that nothing answered and that the lease bounded
// it.
func TestNoAnswerShortLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		retries := &retryLog{}
		c, pn := newPipeClient(t, []string{"pipe:1"}, WithLease(time.Second), WithRetryFunc(retries.f))
		ctx, cancel := context.WithTimeout(context.Background(), 900*time.Millisecond)
		defer cancel()
		ch := goAcquire(ctx, c, "jobs")
		p := pn.accept(t)
		p.next(t, wire.TypeAcquire)
		r := result(t, ch)
		if r.err == nil {
			r.l.Release()
			t.Fatal("Acquire succeeded with no answer")
		}
		retries.mu.Lock()
		defer retries.mu.Unlock()
		if len(retries.errs) != 1 || !errors.Is(retries.errs[0], ErrNoAnswer) || !errors.Is(retries.errs[0], ErrUnconfirmed) {
			t.Fatalf("retries %v, want one ErrNoAnswer that is also ErrUnconfirmed", retries.errs)
		}
		if want := "no answer from pipe:1: no confirmation from the server for 800ms (0.8 × lease 1s)"; retries.errs[0].Error() != want {
			t.Errorf("retry's error %q, want %q", retries.errs[0], want)
		}
	})
}

// TestNoAnswerNotWhileQueued: a wait that ends in the queue is the caller's
// context alone, whatever an earlier attempt met.
func TestNoAnswerNotWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"pipe:1"})
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		ch := goAcquire(ctx, c, "jobs")
		silent := pn.accept(t) // the first attempt: no answer for 5s
		silent.next(t, wire.TypeAcquire)
		p := pn.accept(t)
		p.next(t, wire.TypeAcquire)
		p.waiting(t, 2)
		go func() { // answer every heartbeat
			for f := range p.rx {
				if f.typ == wire.TypeHeartbeat {
					p.conn.Write(wire.AppendWaiting(nil, 2))
				}
			}
		}()
		r := result(t, ch)
		if !errors.Is(r.err, context.DeadlineExceeded) || errors.Is(r.err, ErrNoAnswer) {
			t.Errorf("Acquire: %v, want DeadlineExceeded, not ErrNoAnswer (it ended at position 2)", r.err)
		}
		if !strings.Contains(r.err.Error(), "waiting at position 2") {
			t.Errorf("Acquire: %v, want the place in the queue told", r.err)
		}
	})
}

// TestNoServerAfterAnswer: a server that answered and then goes away, with
// no server to take its place: each failed round of dials is ErrNoAnswer,
// reported and retried, and so is the end of the wait.
func TestNoServerAfterAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		retries := &retryLog{}
		c, pn := newPipeClient(t, []string{"pipe:1"}, WithRetryFunc(retries.f))
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		ch := goAcquire(ctx, c, "jobs")
		p := pn.accept(t)
		p.next(t, wire.TypeAcquire)
		p.waiting(t, 1)
		pn.setDown("pipe:1", true)
		p.fail(t, wire.CodeShutdown, "bye")
		r := result(t, ch)
		if !errors.Is(r.err, context.DeadlineExceeded) || !errors.Is(r.err, ErrNoAnswer) || !strings.Contains(r.err.Error(), "no server answered") {
			t.Errorf("Acquire: %v, want DeadlineExceeded and ErrNoAnswer (no server answered)", r.err)
		}
		retries.mu.Lock()
		defer retries.mu.Unlock()
		if len(retries.errs) < 3 || !errors.Is(retries.errs[0], ErrShutdown) || !errors.Is(retries.errs[1], ErrNoAnswer) {
			t.Errorf("retries %v, want SHUTDOWN, then dials that no server answered", retries.errs)
		}
	})
}

// TestWrongPort: an HTTP server where a lock server should be, and Baton's
// own ops port, are named at once, with ErrWrongPort, and never retried.
func TestWrongPort(t *testing.T) {
	for _, tt := range []struct {
		name, answer, want string
	}{
		{"an HTTP answer", "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request",
			`acquire "jobs": server pipe:1 is not a Baton lock port: it answered in HTTP ("HTTP/1.1 400 Bad Request"), as an HTTP port such as Baton's ops port does`},
		{"Baton's ops port", string(wire.AppendError(nil, wire.CodeProtocol, "this is Baton's ops HTTP port; the lock protocol is on 127.0.0.1:7070")),
			`acquire "jobs": server pipe:1 is not a Baton lock port: this is Baton's ops HTTP port; the lock protocol is on 127.0.0.1:7070`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, pn := newPipeClient(t, []string{"pipe:1"})
				ch := goAcquire(context.Background(), c, "jobs")
				p := pn.accept(t)
				p.next(t, wire.TypeAcquire)
				p.send(t, []byte(tt.answer))
				p.conn.Close()
				r := result(t, ch)
				if r.l != nil {
					r.l.Release()
					t.Fatal("Acquire succeeded")
				}
				if !errors.Is(r.err, ErrWrongPort) || IsRetryable(r.err) || r.err.Error() != tt.want {
					t.Errorf("Acquire: %q (retryable %v), want %q, ErrWrongPort, not retryable", r.err, IsRetryable(r.err), tt.want)
				}
				synctest.Wait()
				if n := pn.dialCount(); n != 1 {
					t.Errorf("%d dials, want 1: a wrong port is not tried again", n)
				}
			})
		})
	}
}
