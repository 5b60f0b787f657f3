package baton

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// TestHeartbeatSchedule plays a server whose replies take a varying time and
// checks, to the nanosecond of the fake clock, when each heartbeat arrives:
// one interval after the previous reply, the interval being
// clamp(lease/4 - 2×srtt, min, lease/4) with srtt an EWMA of alpha 0.2.
func TestHeartbeatSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 30 * time.Second
		c, pn := newPipeClient(t, []string{"pipe:1"}, WithLease(lease))
		// The round trip of each request: ACQUIRE first, then heartbeats.
		rtts := []time.Duration{
			time.Second, time.Second, 0, 0, 0, 3 * time.Second,
			3 * time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second, 0,
		}
		ch := goAcquire(context.Background(), c, "jobs")
		p := pn.accept(t)
		prev := p.next(t, wire.TypeAcquire).at
		time.Sleep(rtts[0])
		p.acquired(t, 7)
		l := result(t, ch).l

		var srtt float64
		for i, rtt := range rtts {
			if i == 0 {
				srtt = float64(rtt)
			} else {
				srtt = 0.8*srtt + 0.2*float64(rtt)
			}
			interval := min(max(lease/4-2*time.Duration(srtt), minHeartbeatInterval), lease/4)
			if i == len(rtts)-1 {
				break
			}
			f := p.next(t, wire.TypeHeartbeat)
			gap := f.at.Sub(prev)
			want := rtt + interval
			if d := gap - want; d < -time.Microsecond || d > time.Microsecond {
				t.Errorf("heartbeat %d: %v after the previous request, want %v (rtt %v + interval %v, srtt %v)",
					i+1, gap, want, rtt, interval, time.Duration(srtt))
			}
			prev = f.at
			time.Sleep(rtts[i+1])
			p.acquired(t, 7)
		}
		if err := l.Err(); err != nil {
			t.Errorf("lock ended: %v", err)
		}
		if err := l.Release(); err != nil {
			t.Errorf("Release: %v", err)
		}
	})
}

// TestUnconfirmedHolderGivesUp: the server stops answering. The client sends
// no second heartbeat while one is in flight, and at 0.8 × lease after the
// write of the last answered request (not the unanswered one) it cancels the
// lock's context and closes the connection: before the server's lease, which
// runs from no earlier than that write, can end.
func TestUnconfirmedHolderGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 30 * time.Second
		c, pn := newPipeClient(t, []string{"pipe:1"}, WithLease(lease))
		l, p := holdLock(t, c, pn, 7)
		start := time.Now()

		hb1 := p.next(t, wire.TypeHeartbeat)
		if got, want := hb1.at.Sub(start), lease/4; got != want {
			t.Errorf("first heartbeat after %v, want %v", got, want)
		}
		p.acquired(t, 7)
		hb2 := p.next(t, wire.TypeHeartbeat) // never answered
		<-l.Done()
		lostAt := time.Now()
		if got, want := lostAt.Sub(hb1.at), lease*8/10; got != want {
			t.Errorf("lock lost %v after the write of the last answered heartbeat, want %v", got, want)
		}
		if got, want := lostAt.Sub(hb2.at), lease*8/10-lease/4; got != want {
			t.Errorf("lock lost %v after the unanswered heartbeat, want %v", got, want)
		}
		closedAt, extra := p.closed(t)
		if len(extra) != 0 {
			t.Errorf("client sent %d more frames while a heartbeat was in flight, want 0", len(extra))
		}
		if !closedAt.Equal(lostAt) {
			t.Errorf("connection closed at +%v, lock lost at +%v: want the same instant", closedAt.Sub(start), lostAt.Sub(start))
		}
		err := l.Err()
		if !errors.Is(err, ErrLockLost) || !errors.Is(err, ErrUnconfirmed) {
			t.Errorf("Err() = %v, want ErrLockLost and ErrUnconfirmed", err)
		}
		if got := context.Cause(l.Context()); got != err {
			t.Errorf("context cause %v, want %v", got, err)
		}
		if got := l.Release(); got != err {
			t.Errorf("Release() = %v, want %v", got, err)
		}
		const wantMsg = `lock "jobs" lost: no confirmation from the server for 24s (0.8 × lease 30s)`
		if err.Error() != wantMsg {
			t.Errorf("message %q, want %q", err, wantMsg)
		}
	})
}

// TestLateReplyConfirmsNothing: a reply that arrives after the deadline must
// not revive the lock.
func TestLateReplyConfirmsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 10 * time.Second
		c, pn := newPipeClient(t, []string{"pipe:1"}, WithLease(lease))
		l, p := holdLock(t, c, pn, 7)
		hb := p.next(t, wire.TypeHeartbeat)
		p.acquired(t, 7)
		p.next(t, wire.TypeHeartbeat)                         // never answered in time
		time.Sleep(hb.at.Add(lease*8/10 - 1).Sub(time.Now())) // just before the deadline
		if l.Err() != nil {
			t.Fatalf("lock lost before the deadline: %v", l.Err())
		}
		time.Sleep(1)
		synctest.Wait()
		if !errors.Is(l.Err(), ErrUnconfirmed) {
			t.Fatalf("at the deadline: Err() = %v, want ErrUnconfirmed", l.Err())
		}
		if got := time.Since(hb.at); got != lease*8/10 {
			t.Errorf("lost %v after the heartbeat, want %v", got, lease*8/10)
		}
		// The reply, too late, finds the connection closed.
		if _, err := p.conn.Write(wire.AppendAcquired(nil, false, 7)); err == nil {
			t.Errorf("a late reply was written, want a closed connection")
		}
	})
}

// TestPromotionPushSeenAtOnce: a waiter learns of its promotion when the push
// arrives, not at its next heartbeat.
func TestPromotionPushSeenAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"pipe:1"}, WithLease(30*time.Second))
		ch := goAcquire(context.Background(), c, "jobs")
		p := pn.accept(t)
		p.next(t, wire.TypeAcquire)
		p.waiting(t, 2)
		// Waiters heartbeat like holders.
		p.next(t, wire.TypeHeartbeat)
		p.waiting(t, 1)
		time.Sleep(3300 * time.Millisecond) // between two heartbeats
		pushAt := time.Now()
		p.push(t, 42)
		r := result(t, ch)
		if r.err != nil {
			t.Fatalf("Acquire: %v", r.err)
		}
		if !r.at.Equal(pushAt) {
			t.Errorf("Acquire returned %v after the push, want at once", r.at.Sub(pushAt))
		}
		if got := r.l.Token(); got != 42 {
			t.Errorf("token %d, want 42", got)
		}
		// The heartbeat in flight at the push may be answered ACQUIRED with
		// the same token: that is the current state, not a violation.
		p.next(t, wire.TypeHeartbeat)
		p.acquired(t, 42)
		p.next(t, wire.TypeHeartbeat)
		if err := r.l.Err(); err != nil {
			t.Errorf("Err() = %v, want nil", err)
		}
		r.l.Release()
	})
}

// TestCancelWhileQueuedClosesAtOnce: the place in the queue is given up the
// instant the caller's context ends.
func TestCancelWhileQueuedClosesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"pipe:1"})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		ch := goAcquire(ctx, c, "jobs")
		p := pn.accept(t)
		p.next(t, wire.TypeAcquire)
		p.waiting(t, 3)
		closedAt, _ := p.closed(t)
		if got := closedAt.Sub(start); got != 5*time.Second {
			t.Errorf("connection closed after %v, want 5s (the context's timeout)", got)
		}
		r := result(t, ch)
		if !errors.Is(r.err, context.DeadlineExceeded) {
			t.Errorf("Acquire: %v, want context.DeadlineExceeded", r.err)
		}
		const want = `acquire "jobs": context deadline exceeded (waiting at position 3)`
		if r.err == nil || r.err.Error() != want {
			t.Errorf("Acquire: %q, want %q", r.err, want)
		}
		pn.noDial(t)
	})
}

// TestWaitingErrors: what each ERROR code does to a waiting Acquire.
func TestWaitingErrors(t *testing.T) {
	for _, tc := range []struct {
		code     wire.Code
		retry    bool
		minDelay time.Duration // before the reconnection, when retried
		maxDelay time.Duration
		sentinel error
	}{
		{wire.CodeShutdown, true, 0, 0, ErrShutdown},
		{wire.CodeOverloaded, true, backoffBase / 2, backoffBase, ErrOverloaded},
		{0x05, true, backoffBase / 2, backoffBase, nil}, // an unknown server condition
		{wire.CodeLeaseExpired, true, 0, 0, ErrLeaseExpired},
		{wire.CodeKicked, false, 0, 0, ErrKicked},
		{wire.CodeBusy, false, 0, 0, ErrBusy},
		{0x1f, false, 0, 0, nil}, // an unknown end by the lock's rules
		{wire.CodeProtocol, false, 0, 0, ErrProtocol},
		{wire.CodeBadRequest, false, 0, 0, ErrBadRequest},
		{wire.CodeVersion, false, 0, 0, ErrVersion},
		{wire.CodeUnauthorized, false, 0, 0, ErrUnauthorized},
		{0x40, false, 0, 0, nil}, // a code of no known class
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, pn := newPipeClient(t, []string{"pipe:1"})
				ch := goAcquire(context.Background(), c, "jobs")
				p := pn.accept(t)
				p.next(t, wire.TypeAcquire)
				p.waiting(t, 1)
				failAt := time.Now()
				p.fail(t, tc.code, "because")
				if !tc.retry {
					r := result(t, ch)
					var we *wire.Error
					if !errors.As(r.err, &we) || we.Code != tc.code || we.Msg != "because" {
						t.Fatalf("Acquire: %v, want a *wire.Error with code %v", r.err, tc.code)
					}
					if tc.sentinel != nil && !errors.Is(r.err, tc.sentinel) {
						t.Errorf("Acquire: %v, want errors.Is %v", r.err, tc.sentinel)
					}
					if want := `acquire "jobs": ` + tc.code.String() + ": because"; r.err.Error() != want {
						t.Errorf("message %q, want %q", r.err, want)
					}
					pn.noDial(t)
					return
				}
				p2 := pn.accept(t)
				if d := time.Since(failAt); d < tc.minDelay || d > tc.maxDelay {
					t.Errorf("reconnected after %v, want %v .. %v", d, tc.minDelay, tc.maxDelay)
				}
				p2.next(t, wire.TypeAcquire)
				p2.acquired(t, 9)
				r := result(t, ch)
				if r.err != nil {
					t.Fatalf("Acquire after %v: %v", tc.code, r.err)
				}
				r.l.Release()
			})
		})
	}
}

// TestHeldLosses: every way a held lock ends reaches the caller, with
// errors.Is for the class and the cause.
func TestHeldLosses(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, p *peer)
		is   []error
		code wire.Code // 0: no *wire.Error in the chain
		msg  string
	}{
		{"force-released", func(t *testing.T, p *peer) { p.fail(t, wire.CodeForceReleased, "by admin") },
			[]error{ErrLockLost, ErrForceReleased}, wire.CodeForceReleased,
			`lock "jobs" lost: server sent FORCE_RELEASED: by admin`},
		{"shutdown", func(t *testing.T, p *peer) { p.fail(t, wire.CodeShutdown, "bye") },
			[]error{ErrLockLost, ErrShutdown}, wire.CodeShutdown,
			`lock "jobs" lost: server sent SHUTDOWN: bye`},
		{"lease expired", func(t *testing.T, p *peer) { p.fail(t, wire.CodeLeaseExpired, "") },
			[]error{ErrLockLost, ErrLeaseExpired}, wire.CodeLeaseExpired,
			`lock "jobs" lost: server sent LEASE_EXPIRED`},
		{"connection closed", func(t *testing.T, p *peer) { p.conn.Close() },
			[]error{ErrLockLost}, 0,
			`lock "jobs" lost: connection to pipe:1 broke: EOF`},
		{"WAITING after grant", func(t *testing.T, p *peer) { p.next(t, wire.TypeHeartbeat); p.waiting(t, 1) },
			[]error{ErrLockLost}, 0,
			`lock "jobs" lost: server pipe:1 broke the protocol: WAITING (position 1) after granting the lock`},
		{"other token", func(t *testing.T, p *peer) { p.next(t, wire.TypeHeartbeat); p.acquired(t, 8) },
			[]error{ErrLockLost}, 0,
			`lock "jobs" lost: server pipe:1 broke the protocol: ACQUIRED with token 8 while holding token 7`},
		{"push while held", func(t *testing.T, p *peer) { p.push(t, 8) },
			[]error{ErrLockLost}, 0,
			`lock "jobs" lost: server pipe:1 broke the protocol: promotion push while holding the lock`},
		{"unsolicited reply", func(t *testing.T, p *peer) { p.acquired(t, 7) },
			[]error{ErrLockLost}, 0,
			`lock "jobs" lost: server pipe:1 broke the protocol: reply with no request outstanding (token 7, position 0)`},
		{"oversize frame", func(t *testing.T, p *peer) { p.send(t, []byte{0x81, 0x04, 0x01}) },
			[]error{ErrLockLost}, 0,
			`lock "jobs" lost: server pipe:1 broke the protocol: frame length 1025 exceeds the limit of 1024`},
		{"unknown type", func(t *testing.T, p *peer) { p.send(t, []byte{0x83, 0, 0}) },
			[]error{ErrLockLost}, 0,
			`lock "jobs" lost: server pipe:1 broke the protocol: unexpected frame type 0x83`},
		{"token 0", func(t *testing.T, p *peer) { p.next(t, wire.TypeHeartbeat); p.acquired(t, 0) },
			[]error{ErrLockLost}, 0,
			`lock "jobs" lost: server pipe:1 broke the protocol: ACQUIRED with token 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, pn := newPipeClient(t, []string{"pipe:1"})
				l, p := holdLock(t, c, pn, 7)
				time.Sleep(time.Second)
				tc.end(t, p)
				endAt := time.Now()
				<-l.Done()
				if d := time.Since(endAt); d != 0 {
					t.Errorf("lock lost %v after the event, want at once", d)
				}
				err := l.Err()
				for _, want := range tc.is {
					if !errors.Is(err, want) {
						t.Errorf("Err() = %v, want errors.Is %v", err, want)
					}
				}
				var we *wire.Error
				switch {
				case tc.code == 0 && errors.As(err, &we):
					t.Errorf("Err() = %v holds a *wire.Error %v, want none", err, we.Code)
				case tc.code != 0 && (!errors.As(err, &we) || we.Code != tc.code):
					t.Errorf("Err() = %v, want a *wire.Error with code %v", err, tc.code)
				}
				if err == nil || err.Error() != tc.msg {
					t.Errorf("message %q, want %q", err, tc.msg)
				}
				if got := l.Release(); got != err {
					t.Errorf("Release() = %v, want %v", got, err)
				}
				pn.noDial(t) // a held lock is never retried
			})
		})
	}
}

func TestReleaseIsIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"pipe:1"})
		l, p := holdLock(t, c, pn, 7)
		time.Sleep(time.Second)
		releaseAt := time.Now()
		for i := range 3 {
			if err := l.Release(); err != nil {
				t.Errorf("Release #%d: %v, want nil", i+1, err)
			}
		}
		if closedAt, _ := p.closed(t); !closedAt.Equal(releaseAt) {
			t.Errorf("connection closed %v after Release, want at once", closedAt.Sub(releaseAt))
		}
		if err := l.Err(); err != ErrReleased {
			t.Errorf("Err() = %v, want ErrReleased", err)
		}
		if l.Token() != 7 || l.Name() != "jobs" {
			t.Errorf("Token, Name = %d, %q, want 7, jobs", l.Token(), l.Name())
		}
	})
}

// TestLeaseShorterThanRTT: replies that always come after 0.8 × lease can
// never make a holder; Acquire keeps taking new places, backing off, until
// its context ends.
func TestLeaseShorterThanRTT(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease, rtt = 10 * time.Millisecond, 20 * time.Millisecond
		c, pn := newPipeClient(t, []string{"pipe:1"}, WithLease(lease))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ch := goAcquire(ctx, c, "jobs")
		var peers sync.WaitGroup // the bubble's clock stops when the test returns
		defer peers.Wait()
		peers.Add(1)
		go func() {
			defer peers.Done()
			for p := range pn.peers {
				peers.Add(1)
				go func() {
					defer peers.Done()
					f, ok := <-p.rx
					if !ok || f.typ != wire.TypeAcquire {
						return
					}
					time.Sleep(rtt)
					p.conn.Write(wire.AppendAcquired(nil, false, 1)) // fails: closed at 8ms
				}()
			}
		}()
		r := result(t, ch)
		close(pn.peers)
		if r.l != nil {
			r.l.Release()
			t.Fatalf("Acquire succeeded over a round trip longer than the lease")
		}
		// No attempt was answered in time: the error says so (ErrNoAnswer),
		// and that the lease bounded the wait (ErrUnconfirmed).
		want := `acquire "jobs": context deadline exceeded (no answer from pipe:1: no confirmation from the server for 8ms (0.8 × lease 10ms))`
		if !errors.Is(r.err, context.DeadlineExceeded) || !errors.Is(r.err, ErrNoAnswer) || !errors.Is(r.err, ErrUnconfirmed) || r.err.Error() != want {
			t.Errorf("Acquire: %q, want %q, matching ErrNoAnswer and ErrUnconfirmed", r.err, want)
		}
		// Each attempt lasts 8ms, then waits of 25-50ms, 50-100ms,
		// 100-200ms, 200-400ms, 400-800ms: 4 to 6 attempts in 1s.
		if n := pn.dialCount(); n < 4 || n > 6 {
			t.Errorf("%d attempts in 1s, want 4 to 6", n)
		}
	})
}

// TestStuckWrite: a peer that stops reading blocks the heartbeat's write
// (net.Pipe has no buffer, like a full socket); the write gives up at the
// session's deadline and the lock is lost then, not later. A Release during
// such a write returns at once.
func TestStuckWrite(t *testing.T) {
	for _, release := range []bool{false, true} {
		t.Run(map[bool]string{false: "deadline", true: "release"}[release], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const lease = 10 * time.Second
				c, pn := newPipeClient(t, []string{"pipe:1"}, WithLease(lease))
				pn.unread = true
				ch := goAcquire(context.Background(), c, "jobs")
				p := pn.accept(t)
				var h [wire.HeaderSize]byte
				if _, err := io.ReadFull(p.conn, h[:]); err != nil {
					t.Fatal(err)
				}
				hdr, _ := wire.ParseHeader(h[:])
				io.ReadFull(p.conn, make([]byte, hdr.Length))
				start := time.Now()
				p.acquired(t, 7)
				l := result(t, ch).l
				// The heartbeat at lease/4 finds nobody reading.
				if release {
					time.Sleep(lease / 2)
					if err := l.Release(); err != nil {
						t.Errorf("Release: %v, want nil", err)
					}
					if d := time.Since(start); d != lease/2 {
						t.Errorf("Release returned after %v, want at once (%v)", d, lease/2)
					}
					return
				}
				<-l.Done()
				if d := time.Since(start); d != lease*8/10 {
					t.Errorf("lost after %v, want %v", d, lease*8/10)
				}
				if err := l.Err(); !errors.Is(err, ErrUnconfirmed) {
					t.Errorf("Err() = %v, want ErrUnconfirmed", err)
				}
			})
		})
	}
}

// TestWaitingFunc: WithWaitingFunc sees the position of every WAITING reply,
// the first answer and each heartbeat's, and nothing once granted.
func TestWaitingFunc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var got []int
		record := func(position int) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, position)
		}
		c, pn := newPipeClient(t, []string{"pipe:1"}, WithLease(30*time.Second))
		ch := goAcquire(context.Background(), c, "jobs", WithWaitingFunc(record))
		p := pn.accept(t)
		p.next(t, wire.TypeAcquire)
		p.waiting(t, 3)
		p.next(t, wire.TypeHeartbeat)
		p.waiting(t, 2)
		p.next(t, wire.TypeHeartbeat)
		p.waiting(t, 1)
		p.push(t, 9)
		r := result(t, ch)
		if r.err != nil {
			t.Fatalf("Acquire: %v", r.err)
		}
		p.next(t, wire.TypeHeartbeat)
		p.acquired(t, 9)
		p.next(t, wire.TypeHeartbeat)
		r.l.Release()
		mu.Lock()
		defer mu.Unlock()
		if want := []int{3, 2, 1}; !slices.Equal(got, want) {
			t.Errorf("positions reported %v, want %v", got, want)
		}
	})
}
