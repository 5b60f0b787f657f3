package baton

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// Moves against the fake cluster (fakev3_test.go): what the user's code
// sees, and what the server's table keeps.

// fakeClient is a Client on a pretend cluster of nodes a:1, b:1, c:1 (a:1
// leads), over pipes.
func fakeClient(t *testing.T, opts ...Option) (*Client, *fakeCluster) {
	t.Helper()
	f := newFakeCluster(t, "a:1")
	c, pn := newPipeClient(t, []string{"a:1", "b:1", "c:1"}, append([]Option{WithLease(moveLease)}, opts...)...)
	f.onPipes(pn)
	return c, f
}

// TestDoThroughAMove: Do's work runs on through a planned handover, a
// crash of the leader, a standalone server's restart and a silent leader:
// its context is not cancelled, Lock.Err stays nil, the token is the
// same, and Do returns the work's nil. The claim ends up on the new
// leader, connected.
func TestDoThroughAMove(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(f *fakeCluster)
		to    string // where the claim lands
	}{
		{"a planned handover", func(f *fakeCluster) { f.handover("b:1") }, "b:1"},
		{"a crash of the leader", func(f *fakeCluster) { f.crash("c:1") }, "c:1"},
		{"a standalone server's restart", func(f *fakeCluster) { f.shutdown() }, "a:1"},
		{"a silent leader that comes back", func(f *fakeCluster) {
			f.freeze()
			time.Sleep(5500 * time.Millisecond) // past the silence trigger, before the deadline
			f.unfreeze()
		}, "a:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				moves := newMovedLog()
				c, f := fakeClient(t, moves.option())
				granted := make(chan uint64)
				faulted := make(chan struct{})
				done := make(chan error)
				go func() {
					done <- c.Do(context.Background(), "jobs", func(ctx context.Context, l *Lock) error {
						granted <- l.Token()
						<-faulted
						for range 20 { // the work's steps, each asking first
							if err := l.Err(); err != nil {
								return err
							}
							if ctx.Err() != nil {
								return context.Cause(ctx)
							}
							time.Sleep(time.Second)
						}
						return nil
					})
				}()
				token := <-granted
				time.Sleep(time.Second)
				tc.fault(f)
				close(faulted)
				if err := <-done; err != nil {
					t.Fatalf("Do: %v", err)
				}
				synctest.Wait() // the server reads the release
				if tokens, _ := f.holders("jobs"); len(tokens) != 0 {
					t.Errorf("holders after Do: %v, want none (released)", tokens)
				}
				mv := moves.next(t)
				if mv.To != tc.to || mv.Token != token || !mv.Held {
					t.Errorf("moved %+v, want the holder of token %d to %s", mv, token, tc.to)
				}
			})
		})
	}
}

// TestWaitersKeepTheirPlaces: across a planned handover, the holder keeps
// its token and the waiters their order, in front of a claim that came
// while they moved; each is granted in that order.
func TestWaitersKeepTheirPlaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, f := fakeClient(t, WithQueueBehindSelf(true))
		holder, err := c.Acquire(context.Background(), "jobs")
		if err != nil {
			t.Fatal(err)
		}
		var waiters []<-chan acquireResult
		for range 3 {
			waiters = append(waiters, goAcquire(context.Background(), c, "jobs"))
			synctest.Wait()
		}
		tickets := f.queued("jobs")
		f.handover("b:1")
		latecomer := goAcquire(context.Background(), c, "jobs")
		f.wait(t, "every claim back on b:1", func() bool {
			tokens, connected := f.holders("jobs")
			return len(tokens) == 1 && connected[0] && len(f.queued("jobs")) == 4
		})
		if got := f.queued("jobs"); !equalPrefix(got, tickets) {
			t.Fatalf("queue after the move %v, want the old queue %v first", got, tickets)
		}
		if err := holder.Err(); err != nil {
			t.Fatalf("holder: %v", err)
		}
		holder.Release()
		for i, ch := range append(waiters, latecomer) {
			r := result(t, ch)
			if r.err != nil {
				t.Fatalf("waiter %d: %v", i, r.err)
			}
			select {
			case <-latecomer:
				if i < 3 {
					t.Fatalf("the latecomer was granted before waiter %d", i)
				}
			default:
			}
			r.l.Release()
		}
	})
}

func equalPrefix(got, want []uint64) bool {
	if len(got) < len(want) {
		return false
	}
	for i := range want {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// TestHelpersThroughAMove: a LockSet, a leadership and a maximum hold go
// on through a handover, and the re-entrancy guard still holds.
func TestHelpersThroughAMove(t *testing.T) {
	t.Run("LockSet", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, f := fakeClient(t)
			set, err := c.AcquireAll(context.Background(), []string{"a", "b"})
			if err != nil {
				t.Fatal(err)
			}
			f.handover("b:1")
			f.wait(t, "both claims back", func() bool {
				ta, ca := f.holders("a")
				tb, cb := f.holders("b")
				return len(ta) == 1 && ca[0] && len(tb) == 1 && cb[0]
			})
			time.Sleep(moveLease)
			if err := set.Err(); err != nil {
				t.Fatalf("LockSet: %v", err)
			}
			if _, err := c.Acquire(context.Background(), "a"); !errors.Is(err, ErrAlreadyHeld) {
				t.Errorf("Acquire of a name of the set: %v, want ErrAlreadyHeld", err)
			}
			if err := set.Release(); err != nil {
				t.Errorf("Release: %v", err)
			}
		})
	})
	t.Run("leadership", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, f := fakeClient(t)
			ld, err := c.Campaign(context.Background(), "leader", "me:1")
			if err != nil {
				t.Fatal(err)
			}
			f.crash("b:1")
			time.Sleep(moveLease)
			if err := ld.Err(); err != nil {
				t.Fatalf("leadership: %v", err)
			}
			if err := ld.Resign(); err != nil {
				t.Errorf("Resign: %v", err)
			}
		})
	})
	t.Run("maximum hold", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, f := fakeClient(t, WithMaxHold(5*time.Second))
			start := time.Now()
			l, err := c.Acquire(context.Background(), "jobs")
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			f.handover("b:1")
			<-l.Done()
			if err := l.Err(); !errors.Is(err, ErrMaxHoldReached) || time.Since(start) != 5*time.Second {
				t.Errorf("Err %v after %v, want ErrMaxHoldReached after 5s", err, time.Since(start))
			}
		})
	})
}

// TestResetLosesTheClaim: a reset of the holder's connection (a
// middlebox's, which the server takes for a release) ends the lock, and
// the client does not resume it; the next waiter is granted.
func TestResetLosesTheClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, f := fakeClient(t, WithQueueBehindSelf(true))
		l, err := c.Acquire(context.Background(), "jobs")
		if err != nil {
			t.Fatal(err)
		}
		next := goAcquire(context.Background(), c, "jobs")
		synctest.Wait()
		f.resetHolder("jobs")
		<-l.Done()
		if err := l.Err(); !errors.Is(err, ErrLockLost) {
			t.Errorf("Err: %v, want ErrLockLost", err)
		}
		r := result(t, next)
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.l.Release()
		if rs := f.resumesSeen(); len(rs) != 0 {
			t.Errorf("resumes %+v, want none after a reset", rs)
		}
	})
}

// TestMoveOverTCP: the same over real connections, with and without TLS:
// the end of a server's process (a FIN; over TLS with no close_notify)
// moves the claim; a reset, as the kernel delivers it, loses it.
func TestMoveOverTCP(t *testing.T) {
	cert, pool := selfSigned(t)
	for _, useTLS := range []bool{false, true} {
		t.Run(fmt.Sprintf("TLS %v", useTLS), func(t *testing.T) {
			var srvCfg *tls.Config
			var opts []Option
			if useTLS {
				srvCfg = &tls.Config{Certificates: []tls.Certificate{cert}}
				opts = append(opts, WithTLSConfig(&tls.Config{RootCAs: pool}))
			}
			f := newFakeCluster(t, "")
			a, b := f.listen(t, srvCfg), f.listen(t, srvCfg)
			f.setLeader(a)
			moves := newMovedLog()
			c := newTestClient(t, []string{a, b}, append(opts, WithLease(2*time.Second), moves.option())...)
			l := acquire(t, c, "jobs")
			f.crash(b)
			f.wait(t, "the claim on "+b, func() bool {
				tokens, connected := f.holders("jobs")
				return len(tokens) == 1 && connected[0] && f.connsOpen(b) == 1
			})
			if err := l.Err(); err != nil {
				t.Fatalf("Err after the crash: %v", err)
			}
			mv := <-moves.ch
			if mv.From != a || mv.To != b || mv.Token != l.Token() {
				t.Errorf("Moved %+v, want from %s to %s", mv, a, b)
			}
			t.Logf("the claim moved from %s to %s in %v (%d attempts; %v)", mv.From, mv.To, mv.Took, mv.Attempts, mv.Reason)
			f.resetHolder("jobs")
			select {
			case <-l.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the lock outlived a reset by 10s")
			}
			if err := l.Err(); !errors.Is(err, ErrLockLost) || !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("Err after a reset: %v, want ErrLockLost and ECONNRESET", err)
			}
			if n := len(f.resumesSeen()); n != 1 {
				t.Errorf("%d resumes, want 1 (none after the reset)", n)
			}
		})
	}
}
