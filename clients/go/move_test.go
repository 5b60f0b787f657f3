package baton

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// Tests of a claim's move (docs/protocol.md, section 14, "The client"),
// against a scripted server over net.Pipe, on synctest's clock.

const moveLease = 10 * time.Second

// TestMoveAfterServerEnd: when the server ends the claim's connection on
// purpose (an ERROR of a server condition) or goes away (the end of the
// stream at a frame boundary), a holder with a credential resumes at once,
// where the spec says, with its token, generation, credential and attempt
// 1; the answer confirms it as of the resume's send; the Lock, its context
// and the work see nothing; heartbeats go on at the new connection.
func TestMoveAfterServerEnd(t *testing.T) {
	for _, tc := range []struct {
		name  string
		end   func(t *testing.T, p *peer)
		where string
	}{
		{"SHUTDOWN", func(t *testing.T, p *peer) { p.fail(t, wire.CodeShutdown, "bye") }, "a:1"},
		{"NOT_LEADER naming a node of the list", func(t *testing.T, p *peer) { p.fail(t, wire.CodeNotLeader, "c:1") }, "c:1"},
		{"NOT_LEADER naming a node off the list", func(t *testing.T, p *peer) { p.fail(t, wire.CodeNotLeader, "evil:1") }, "b:1"},
		{"OVERLOADED", func(t *testing.T, p *peer) { p.fail(t, wire.CodeOverloaded, "") }, "a:1"},
		{"a server condition not yet named", func(t *testing.T, p *peer) { p.fail(t, 0x0f, "") }, "a:1"},
		{"the end of the stream", func(t *testing.T, p *peer) { p.conn.Close() }, "b:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				moves := newMovedLog()
				c, pn := newPipeClient(t, []string{"a:1", "b:1", "c:1"}, WithLease(moveLease), WithOwner("h:1"), moves.option())
				l, p := holdV3(t, c, pn, 0x0300000007)
				ctx := l.Context()
				time.Sleep(time.Second)
				start := time.Now()
				tc.end(t, p)
				q := pn.accept(t)
				if q.addr != tc.where || time.Since(start) != 0 {
					t.Fatalf("resumed at %s after %v, want %s at once", q.addr, time.Since(start), tc.where)
				}
				a, f := q.resume(t, true, 0x0300000007, 1, testCred)
				if a.Resume.Attempt != 1 || a.Shared() || a.Limit != 1 || a.LeaseMs != 10000 || a.Name != "jobs" || a.Owner != "h:1" || a.NoWait() {
					t.Errorf("resume %+v, want attempt 1 of the exclusive claim jobs, lease 10000, owner h:1", a)
				}
				time.Sleep(100 * time.Millisecond) // the resume's round trip
				q.acquiredV3(t, 0x0300000007, 1, testCred)
				synctest.Wait()
				if err := l.Err(); err != nil {
					t.Fatalf("Err after the move: %v", err)
				}
				if ctx.Err() != nil {
					t.Fatalf("the Lock's context ended: %v", context.Cause(ctx))
				}
				select {
				case <-l.Done():
					t.Fatal("Done closed by the move")
				default:
				}
				if got, want := l.ValidUntil(), f.at.Add(moveLease*8/10); !got.Equal(want) {
					t.Errorf("ValidUntil +%v after the resume's send, want 0.8 × lease", got.Sub(f.at))
				}
				if l.Token() != 0x0300000007 {
					t.Errorf("token %#x, want the same", l.Token())
				}
				mv := moves.next(t)
				if mv.From != "a:1" || mv.To != tc.where || !mv.Held || mv.Attempts != 1 || mv.Token != 0x0300000007 || mv.Took != 100*time.Millisecond || mv.Name != "jobs" {
					t.Errorf("Moved %+v", mv)
				}
				q.next(t, wire.TypeHeartbeat) // the schedule goes on at the new connection
				if err := l.Release(); err != nil {
					t.Errorf("Release: %v", err)
				}
				q.closed(t)
			})
		})
	}
}

// TestMoveLosesAfter: the ends a claim is not carried across. A reset or an
// end inside a frame may have been a release on the server's side (a
// middlebox's reset reaches both ends); the codes of the lock's rules and
// client errors end it; and a claim the server gave no credential ends as
// in version 2, whatever ended its connection.
func TestMoveLosesAfter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		noCred bool
		end    func(t *testing.T, p *peer)
		is     error
	}{
		{"a reset", false, func(t *testing.T, p *peer) { p.resetConn() }, syscall.ECONNRESET},
		{"the end of the stream inside a header", false, func(t *testing.T, p *peer) { p.send(t, []byte{0x82, 0x00}); p.conn.Close() }, io.ErrUnexpectedEOF},
		{"the end of the stream after a header", false, func(t *testing.T, p *peer) { p.send(t, []byte{0x82, 0x00, 0x09}); p.conn.Close() }, io.ErrUnexpectedEOF},
		{"FORCE_RELEASED", false, func(t *testing.T, p *peer) { p.fail(t, wire.CodeForceReleased, "") }, ErrForceReleased},
		{"LEASE_EXPIRED", false, func(t *testing.T, p *peer) { p.fail(t, wire.CodeLeaseExpired, "") }, ErrLeaseExpired},
		{"PROTOCOL", false, func(t *testing.T, p *peer) { p.fail(t, wire.CodeProtocol, "") }, ErrProtocol},
		{"a code outside the ranges", false, func(t *testing.T, p *peer) { p.fail(t, 0x30, "") }, &wire.Error{Code: 0x30}},
		{"SHUTDOWN to a claim without a credential", true, func(t *testing.T, p *peer) { p.fail(t, wire.CodeShutdown, "") }, ErrShutdown},
		{"the end of the stream of a claim without a credential", true, func(t *testing.T, p *peer) { p.conn.Close() }, io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, pn := newPipeClient(t, []string{"a:1", "b:1"}, WithLease(moveLease))
				var l *Lock
				var p *peer
				if tc.noCred {
					l, p = holdLock(t, c, pn, 7) // a 9-byte ACQUIRED: no credential
				} else {
					l, p = holdV3(t, c, pn, 7)
				}
				tc.end(t, p)
				<-l.Done()
				if err := l.Err(); !errors.Is(err, ErrLockLost) || !errors.Is(err, tc.is) {
					t.Errorf("Err: %v, want ErrLockLost and %v", err, tc.is)
				}
				pn.noDialWithin(t, time.Minute)
			})
		})
	}
}

// TestMoveAfterSilence: a holder whose heartbeat is unanswered moves when
// half (and a jittered eighth) of the time left to its deadline has gone,
// to the next address, keeping the claim's connection open: it still
// confirms. Adopted, the new connection takes the heartbeats, and the old
// one is closed when its server ends it (MOVED).
func TestMoveAfterSilence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"a:1", "b:1"}, WithLease(moveLease))
		l, p := holdV3(t, c, pn, 7)
		hb := p.next(t, wire.TypeHeartbeat) // left unanswered
		deadline := l.ValidUntil()
		q := pn.accept(t)
		left := deadline.Sub(hb.at)
		if waited := time.Since(hb.at); q.addr != "b:1" || waited < left/2 || waited > left*5/8 {
			t.Fatalf("resumed at %s %v after the heartbeat, want b:1 within [%v, %v]", q.addr, waited, left/2, left*5/8)
		}
		q.resume(t, true, 7, 1, testCred)
		q.acquiredV3(t, 7, 1, testCred)
		synctest.Wait()
		if err := l.Err(); err != nil {
			t.Fatalf("Err after the move: %v", err)
		}
		select {
		case f, ok := <-p.rx:
			t.Fatalf("the connection left was closed or written to (%v, %v) before its server ended it", f.typ, ok)
		default:
		}
		p.fail(t, wire.CodeMoved, "")
		p.closed(t)
		q.next(t, wire.TypeHeartbeat)
	})
}

// TestLateAnswerAfterSilence: the answer to the unanswered heartbeat comes
// after the move began: it confirms the claim, no more attempts are made,
// and the attempt left open is adopted when it is answered.
func TestLateAnswerAfterSilence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"a:1", "b:1", "c:1"}, WithLease(moveLease))
		l, p := holdV3(t, c, pn, 7)
		hb := p.next(t, wire.TypeHeartbeat)
		q := pn.accept(t) // silence: an attempt to b:1
		q.resume(t, true, 7, 1, testCred)
		p.acquired(t, 7) // the late answer
		synctest.Wait()
		if got, want := l.ValidUntil(), hb.at.Add(moveLease*8/10); !got.Equal(want) {
			t.Errorf("ValidUntil +%v after the heartbeat, want 0.8 × lease: the late answer confirms", got.Sub(hb.at))
		}
		pn.noDialWithin(t, moveLease/4) // no attempt to c:1 (it would come lease/8 after the first)
		q.acquiredV3(t, 7, 1, testCred) // the attempt answered later: adopted
		p.fail(t, wire.CodeMoved, "")
		p.closed(t)
		q.next(t, wire.TypeHeartbeat)
		if err := l.Err(); err != nil {
			t.Fatalf("Err: %v", err)
		}
	})
}

// TestWaiterMovesAtItsDeadline: a waiter whose server is silent waits for
// its deadline, then moves, keeping the connection; a push that comes
// there after the deadline is not believed; the answer to the resume by
// ticket keeps its place, and the grant comes on the new connection.
func TestWaiterMovesAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"a:1", "b:1"}, WithLease(moveLease))
		start := time.Now()
		ch, p := waitV3(t, c, pn, 0x0300000009)
		p.next(t, wire.TypeHeartbeat) // unanswered
		q := pn.accept(t)
		if waited := time.Since(start); q.addr != "b:1" || waited < moveLease*8/10 || waited > moveLease*8/10+moveLease/8 {
			t.Fatalf("resumed at %s after %v, want b:1 at the deadline (%v), spread over lease/8", q.addr, waited, moveLease*8/10)
		}
		p.pushV3(t, 11, 1, testCred) // after the deadline: not believed
		q.resume(t, false, 0x0300000009, 1, testCred)
		q.waitingV3(t, 1, 0x0300000009, 1, testCred)
		synctest.Wait()
		p.pushV3(t, 11, 1, testCred) // on the connection left, once the deadline moved on: not believed either
		synctest.Wait()
		select {
		case r := <-ch:
			t.Fatalf("Acquire returned %v, %v on a push after the deadline", r.l, r.err)
		default:
		}
		q.pushV3(t, 12, 1, testCred2)
		r := result(t, ch)
		if r.err != nil || r.l.Token() != 12 {
			t.Fatalf("Acquire: %v, token %d; want the grant of the new connection, 12", r.err, r.l.Token())
		}
		r.l.Release()
	})
}

// TestAnswerAfterTheDeadlineLoses: an answer to a resume confirms the
// claim only if it arrives before the claim's deadline. The machine is
// suspended after the resume was sent, past the deadline but not past the
// resume's own send plus 0.8 × lease: the answer that arrives then must
// not be adopted, and the lock is lost.
func TestAnswerAfterTheDeadlineLoses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"a:1"}, WithLease(moveLease))
		l, p := holdV3(t, c, pn, 7) // deadline at 8s
		time.Sleep(time.Second)
		p.fail(t, wire.CodeShutdown, "")
		q := pn.accept(t)
		q.resume(t, true, 7, 1, testCred) // sent at 1s: its own bound is 9s
		pn.clock.suspend(7500 * time.Millisecond)
		q.acquiredV3(t, 7, 1, testCred) // read at 8.5s
		synctest.Wait()
		if err := l.Err(); !errors.Is(err, ErrLockLost) || !errors.Is(err, ErrUnconfirmed) {
			t.Errorf("Err at once: %v, want ErrLockLost and ErrUnconfirmed", err)
		}
		answered := time.Now()
		q.closed(t)
		if time.Since(answered) != 0 {
			t.Errorf("the attempt was closed %v after the late answer, want at once", time.Since(answered))
		}
	})
}

// TestDeadlineCheckedBeforeTheSend: a holder checks its deadline right
// before it writes a resume. The dial takes long, and the machine sleeps
// meanwhile past the deadline: the connection is closed with nothing sent
// on it, and the lock is lost.
func TestDeadlineCheckedBeforeTheSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"a:1"}, WithLease(moveLease))
		l, p := holdV3(t, c, pn, 7)
		hold := make(chan struct{})
		pn.mu.Lock()
		pn.hold = hold
		pn.mu.Unlock()
		p.fail(t, wire.CodeShutdown, "")
		synctest.Wait() // the resume's dial waits
		pn.clock.suspend(9 * time.Second)
		close(hold)
		q := pn.accept(t)
		if _, sent := q.closed(t); len(sent) != 0 {
			t.Errorf("%d frames sent past the deadline (first: %v), want none", len(sent), sent[0].typ)
		}
		<-l.Done()
		if err := l.Err(); !errors.Is(err, ErrUnconfirmed) {
			t.Errorf("Err: %v, want ErrUnconfirmed", err)
		}
	})
}

// silenceToB holds a lock on a:1 of a, b, c and lets its heartbeat go
// unanswered: the move's first attempt goes to b:1. It returns the lock,
// the peer of a:1, that of the attempt, and its resume.
func silenceToB(t *testing.T, opts ...Option) (*Lock, *pipeNet, *peer, *peer, wire.Acquire) {
	t.Helper()
	c, pn := newPipeClient(t, []string{"a:1", "b:1", "c:1"}, append([]Option{WithLease(moveLease)}, opts...)...)
	l, p := holdV3(t, c, pn, 7)
	p.next(t, wire.TypeHeartbeat)
	q := pn.accept(t)
	if q.addr != "b:1" {
		t.Fatalf("first attempt to %s, want b:1", q.addr)
	}
	a, _ := q.resume(t, true, 7, 1, testCred)
	return l, pn, p, q, a
}

// TestAttemptsOnePerAddress: with no answer, another attempt goes to
// another address lease/8 after the newest one, each with a higher
// number; never two open attempts to one address: once every address has
// one, the client waits for their answers, until its deadline.
func TestAttemptsOnePerAddress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"a:1", "b:1", "c:1"}, WithLease(moveLease))
		l, p := holdV3(t, c, pn, 7)
		p.fail(t, wire.CodeShutdown, "")
		var peers []*peer
		start := time.Now()
		for i, want := range []string{"a:1", "b:1", "c:1"} {
			q := pn.accept(t)
			a, _ := q.resume(t, true, 7, 1, testCred)
			if q.addr != want || a.Resume.Attempt != uint16(i+1) || time.Since(start) != time.Duration(i)*moveLease/8 {
				t.Fatalf("attempt %d to %s after %v, want attempt %d to %s after %v",
					a.Resume.Attempt, q.addr, time.Since(start), i+1, want, time.Duration(i)*moveLease/8)
			}
			peers = append(peers, q)
		}
		pn.noDialWithin(t, 4*time.Second) // every address has an open attempt
		<-l.Done()
		for _, q := range peers {
			q.closed(t) // the deadline closes them all
		}
		if err := l.Err(); !errors.Is(err, ErrUnconfirmed) || time.Since(start) != moveLease*8/10 {
			t.Errorf("Err %v after %v, want ErrUnconfirmed at the deadline", err, time.Since(start))
		}
	})
}

// TestAttemptsOutOfOrder: the highest-numbered attempt answered is
// adopted, in whatever order the answers come; a lower one answered after
// a higher one is ignored and left open until its server ends it.
func TestAttemptsOutOfOrder(t *testing.T) {
	t.Run("the higher answered first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, pn, a, b, _ := silenceToB(t)
			c := pn.accept(t) // attempt 2, lease/8 later
			c.resume(t, true, 7, 1, testCred)
			c.acquiredV3(t, 7, 1, testCred)
			b.acquiredV3(t, 7, 1, testCred) // attempt 1, later: ignored
			synctest.Wait()
			c.next(t, wire.TypeHeartbeat) // the schedule is on attempt 2's connection
			select {
			case f, ok := <-b.rx:
				t.Fatalf("attempt 1 was written to or closed (%v, %v): it must stay open until its server ends it", f.typ, ok)
			default:
			}
			b.fail(t, wire.CodeMoved, "") // its server: the claim is on a higher attempt
			b.closed(t)
			a.fail(t, wire.CodeMoved, "")
			a.closed(t)
			if err := l.Err(); err != nil {
				t.Fatalf("Err: %v", err)
			}
		})
	})
	t.Run("the lower answered first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, pn, a, b, _ := silenceToB(t)
			c := pn.accept(t)
			c.resume(t, true, 7, 1, testCred)
			b.acquiredV3(t, 7, 1, testCred) // attempt 1: adopted
			synctest.Wait()
			time.Sleep(time.Millisecond)
			c.acquiredV3(t, 7, 1, testCred) // attempt 2: adopted in turn
			b.fail(t, wire.CodeMoved, "")   // the server moved the claim up
			b.closed(t)
			c.next(t, wire.TypeHeartbeat)
			a.fail(t, wire.CodeMoved, "")
			if err := l.Err(); err != nil {
				t.Fatalf("Err: %v", err)
			}
		})
	})
}

// TestMovedOnTheClaimsConnection: MOVED where the claim is means that
// another connection took it over. When that connection is the client's
// own attempt to the same server, it waits for that attempt's answer; when
// it is not, the lock is lost (the credential was used elsewhere). MOVED
// on an attempt (a lower number than the claim's there) ends only that
// attempt.
func TestMovedOnTheClaimsConnection(t *testing.T) {
	t.Run("its own attempt there", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"a:1"}, WithLease(moveLease))
			l, p := holdV3(t, c, pn, 7)
			p.next(t, wire.TypeHeartbeat)
			q := pn.accept(t) // silence: an attempt to the only address
			q.resume(t, true, 7, 1, testCred)
			p.fail(t, wire.CodeMoved, "") // the server moved the claim to it
			p.closed(t)
			synctest.Wait()
			if err := l.Err(); err != nil {
				t.Fatalf("Err after MOVED with an attempt open there: %v", err)
			}
			q.acquiredV3(t, 7, 1, testCred)
			q.next(t, wire.TypeHeartbeat)
		})
	})
	t.Run("another connection", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"a:1", "b:1"}, WithLease(moveLease))
			l, p := holdV3(t, c, pn, 7)
			p.fail(t, wire.CodeMoved, "")
			<-l.Done()
			err := l.Err()
			if !errors.Is(err, ErrLockLost) || !errors.Is(err, ErrMoved) || IsRetryable(err) {
				t.Errorf("Err: %v (retryable %v), want ErrLockLost and ErrMoved, not retryable", err, IsRetryable(err))
			}
			pn.noDialWithin(t, time.Minute)
		})
	})
	t.Run("an attempt the claim has passed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, pn, _, b, _ := silenceToB(t)
			b.fail(t, wire.CodeMoved, "") // ends attempt 1 only
			b.closed(t)
			q := pn.accept(t) // the move goes on
			a, _ := q.resume(t, true, 7, 1, testCred)
			if a.Resume.Attempt != 2 {
				t.Errorf("next attempt %d, want 2", a.Resume.Attempt)
			}
			q.acquiredV3(t, 7, 1, testCred)
			synctest.Wait()
			if err := l.Err(); err != nil {
				t.Fatalf("Err: %v", err)
			}
		})
	})
}

// TestFreshCredential: the first heartbeat reply after a new generation
// carries the claim's credential of that generation, and the next resume
// carries it: a holder's and a waiter's.
func TestFreshCredential(t *testing.T) {
	t.Run("a holder", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"a:1"}, WithLease(moveLease))
			l, p := holdV3(t, c, pn, 7)
			p.next(t, wire.TypeHeartbeat)
			p.acquiredV3(t, 7, 2, testCred2)
			p.next(t, wire.TypeHeartbeat)
			p.acquired(t, 7)
			p.fail(t, wire.CodeShutdown, "")
			q := pn.accept(t)
			q.resume(t, true, 7, 2, testCred2)
			q.acquiredV3(t, 7, 2, testCred2)
			synctest.Wait()
			if err := l.Err(); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("a waiter", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"a:1"}, WithLease(moveLease))
			ch, p := waitV3(t, c, pn, 9)
			p.next(t, wire.TypeHeartbeat)
			p.waitingV3(t, 1, 9, 2, testCred2)
			p.fail(t, wire.CodeShutdown, "")
			q := pn.accept(t)
			q.resume(t, false, 9, 2, testCred2)
			q.acquiredV3(t, 21, 2, testCred2) // granted while it moved
			r := result(t, ch)
			if r.err != nil || r.l.Token() != 21 {
				t.Fatalf("Acquire: %v, want token 21", r.err)
			}
			r.l.Release()
		})
	})
	t.Run("a reply with another token or ticket", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"a:1"}, WithLease(moveLease))
			l, p := holdV3(t, c, pn, 7)
			p.next(t, wire.TypeHeartbeat)
			p.acquiredV3(t, 8, 2, testCred2)
			<-l.Done()
			var v *violationError
			if err := l.Err(); !errors.As(err, &v) {
				t.Errorf("Err: %v, want a protocol violation", err)
			}
		})
	})
}

// TestReleaseDuringAMove: a release while the claim moves closes every
// connection of the claim: the one it moves from, the open attempts, and
// a dial under way, which is closed unused.
func TestReleaseDuringAMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, pn, a, b, _ := silenceToB(t)
		c := pn.accept(t) // attempt 2, lease/8 later
		c.resume(t, true, 7, 1, testCred)
		hold := make(chan struct{})
		pn.mu.Lock()
		pn.hold = hold // the third attempt's dial hangs
		pn.mu.Unlock()
		b.fail(t, wire.CodeMoved, "") // attempt 1 ends: the next one is dialled
		b.closed(t)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if n := pn.dialCount(); n != 4 {
			t.Fatalf("%d dials, want 4: the claim's, two attempts, one under way", n)
		}
		if err := l.Release(); err != nil {
			t.Errorf("Release: %v", err)
		}
		for _, p := range []*peer{a, c} {
			if _, sent := p.closed(t); len(sent) != 0 {
				t.Errorf("%s: %d frames after the resume", p.addr, len(sent))
			}
		}
		close(hold)
		synctest.Wait()
		select {
		case p := <-pn.peers:
			t.Errorf("a connection to %s was handed over after the release", p.addr)
		default:
		}
	})
}

// TestNoFastOpenForResumes: with WithTCPFastOpen, the claim's ACQUIRE goes
// in the SYN, and a resume never does: the network may deliver a SYN's
// data twice.
func TestNoFastOpenForResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"a:1"}, WithLease(moveLease), WithTCPFastOpen(true))
		_, p := holdV3(t, c, pn, 7)
		p.fail(t, wire.CodeShutdown, "")
		q := pn.accept(t)
		q.resume(t, true, 7, 1, testCred)
		pn.mu.Lock()
		defer pn.mu.Unlock()
		if len(pn.fastOpen) != 2 || !pn.fastOpen[0] || pn.syn[0] == nil || pn.fastOpen[1] || pn.syn[1] != nil {
			t.Errorf("Fast Open per dial %v, SYN data set %v, %v; want the claim's dial only", pn.fastOpen, pn.syn[0] != nil, pn.syn[1] != nil)
		}
	})
}

// TestAttemptsThatEndAtOnce: an attempt refused at once is followed by the
// next one after a short jittered wait, to the next address; NOT_LEADER's
// hint, when on the list, at once, unless the connection to that address
// ended with no ERROR less than goneQuiet ago: then once it is quiet.
func TestAttemptsThatEndAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"a:1", "b:1", "c:1"}, WithLease(moveLease))
		l, p := holdV3(t, c, pn, 7)
		gone := time.Now()
		p.conn.Close() // the leader's process died: the next address first
		q := pn.accept(t)
		if q.addr != "b:1" || time.Since(gone) != 0 {
			t.Fatalf("first attempt to %s after %v, want b:1 at once", q.addr, time.Since(gone))
		}
		q.conn.Close() // the end of the stream before any answer
		start := time.Now()
		q = pn.accept(t)
		if waited := time.Since(start); q.addr != "c:1" || waited < 50*time.Millisecond || waited > 100*time.Millisecond {
			t.Fatalf("second attempt to %s after %v, want c:1 after 50 to 100ms", q.addr, waited)
		}
		q.resume(t, true, 7, 1, testCred)
		q.fail(t, wire.CodeNotLeader, "a:1")
		q = pn.accept(t)
		if q.addr != "a:1" || time.Since(gone) != goneQuiet {
			t.Fatalf("third attempt to %s %v after a:1 went away, want a:1 after %v", q.addr, time.Since(gone), goneQuiet)
		}
		if a, _ := q.resume(t, true, 7, 1, testCred); a.Resume.Attempt != 3 {
			t.Errorf("attempt %d, want 3", a.Resume.Attempt)
		}
		q.acquiredV3(t, 7, 1, testCred)
		synctest.Wait()
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
		if got := c.last.Load(); got != 0 {
			t.Errorf("the client's preferred address %d, want 0 (a:1, where the claim landed)", got)
		}
	})
}

// TestNoAttemptToAServerGoingAway: a killed server's process closes its
// sockets one by one, so a connection to its listener made just after the
// claim's connection ended is accepted by the kernel and then reset
// unread, which ends the claim (an attempt's reset may follow a release).
// The client therefore dials an address whose connection ended with no
// ERROR only goneQuiet later: first the next address of a cluster; the
// only address of a standalone server once quiet. Here every connection
// to a:1 within 100ms of its end is reset unread.
func TestNoAttemptToAServerGoingAway(t *testing.T) {
	for _, addrs := range [][]string{{"a:1", "b:1", "c:1"}, {"a:1"}} {
		t.Run(fmt.Sprint(len(addrs), " addresses"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, pn := newPipeClient(t, addrs, WithLease(moveLease))
				l, p := holdV3(t, c, pn, 7)
				time.Sleep(time.Second)
				gone := time.Now()
				p.conn.Close()
				for {
					q := pn.accept(t)
					if q.addr == "a:1" && time.Since(gone) < 100*time.Millisecond {
						q.resetConn() // the dying process's listener
						synctest.Wait()
						if err := l.Err(); err != nil {
							t.Fatalf("attempt to a:1 %v after its end: the claim ended: %v", time.Since(gone), err)
						}
						continue
					}
					q.resume(t, true, 7, 1, testCred)
					q.acquiredV3(t, 7, 1, testCred)
					break
				}
				synctest.Wait()
				if err := l.Err(); err != nil {
					t.Fatalf("after the move: %v", err)
				}
			})
		})
	}
}

// TestResumeRefused: the answers to a resume that end a holder's claim,
// with the error that says why, and whether it is worth a new Acquire.
func TestResumeRefused(t *testing.T) {
	for _, tc := range []struct {
		code      wire.Code
		is        error
		retryable bool
	}{
		{wire.CodeResumeRefused, ErrResumeRefused, true},
		{wire.CodeSuperseded, ErrSuperseded, false},
		{wire.CodeBadCredential, ErrBadCredential, false},
		{wire.CodeForceReleased, ErrForceReleased, false},
		{wire.CodeUnauthorized, ErrUnauthorized, false},
		{wire.CodeBadRequest, ErrBadRequest, false},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, pn := newPipeClient(t, []string{"a:1", "b:1"}, WithLease(moveLease))
				l, p := holdV3(t, c, pn, 7)
				p.fail(t, wire.CodeShutdown, "")
				q := pn.accept(t)
				q.resume(t, true, 7, 1, testCred)
				q.fail(t, tc.code, "")
				<-l.Done()
				err := l.Err()
				if !errors.Is(err, ErrLockLost) || !errors.Is(err, tc.is) || IsRetryable(err) != tc.retryable {
					t.Errorf("Err: %v (retryable %v), want ErrLockLost and %v (retryable %v)", err, IsRetryable(err), tc.is, tc.retryable)
				}
				pn.noDialWithin(t, time.Minute)
			})
		})
	}
}

// TestWaiterRefusedTakesANewPlace: a waiter whose place cannot be carried
// over (RESUME_REFUSED) sends a plain ACQUIRE, at once, and waits at the
// end of the queue; one whose move no server answers within a lease does
// the same.
func TestWaiterRefusedTakesANewPlace(t *testing.T) {
	t.Run("RESUME_REFUSED", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"a:1"}, WithLease(moveLease))
			ch, p := waitV3(t, c, pn, 9)
			p.fail(t, wire.CodeShutdown, "")
			q := pn.accept(t)
			q.resume(t, false, 9, 1, testCred)
			q.fail(t, wire.CodeResumeRefused, "claim ended")
			start := time.Now()
			q = pn.accept(t)
			a, _ := q.acquire(t)
			if a.Resuming() || time.Since(start) != 0 {
				t.Fatalf("after RESUME_REFUSED: resuming %v after %v, want a plain ACQUIRE at once", a.Resuming(), time.Since(start))
			}
			q.acquiredV3(t, 30, 1, testCred)
			r := result(t, ch)
			if r.err != nil || r.l.Token() != 30 {
				t.Fatalf("Acquire: %v", r.err)
			}
			r.l.Release()
		})
	})
	t.Run("no answer within a lease", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"a:1"}, WithLease(moveLease))
			ch, p := waitV3(t, c, pn, 9)
			start := time.Now()
			p.fail(t, wire.CodeShutdown, "")
			q := pn.accept(t)
			q.resume(t, false, 9, 1, testCred) // never answered
			r := pn.accept(t)
			if a, _ := r.acquire(t); a.Resuming() || time.Since(start) < moveLease {
				t.Fatalf("after %v: resuming %v, want a plain ACQUIRE a lease after the move began", time.Since(start), a.Resuming())
			}
			q.closed(t) // the waiter's attempt was closed: it gave its place up
			r.acquiredV3(t, 30, 1, testCred)
			res := result(t, ch)
			if res.err != nil {
				t.Fatal(res.err)
			}
			res.l.Release()
		})
	})
}

// credentialForms are the ways a credential could leak into text: hex,
// base64, its bytes as fmt prints a byte array, and the bytes themselves.
func credentialForms(c wire.Credential) []string {
	return []string{
		hex.EncodeToString(c[:]), strings.ToUpper(hex.EncodeToString(c[:])), fmt.Sprintf("% x", c[:]),
		base64.StdEncoding.EncodeToString(c[:]), base64.RawURLEncoding.EncodeToString(c[:]),
		fmt.Sprint([16]byte(c)), fmt.Sprint(c[:]), string(c[:8]),
	}
}

// TestMoveLog: the logger says that a claim moves and that it moved
// (Info: from where, to where, how many attempts, how long), and every
// refusal (Warn, or Error for those that say a premise broke); no record,
// error or printed value carries the claim's credential.
func TestMoveLog(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  func(t *testing.T, q *peer)
		message string
		level   slog.Level
	}{
		{"moved", func(t *testing.T, q *peer) { q.acquiredV3(t, 7, 1, testCred) }, "baton: claim moved", slog.LevelInfo},
		{"refused", func(t *testing.T, q *peer) { q.fail(t, wire.CodeResumeRefused, "claim ended") }, "baton: resume refused", slog.LevelWarn},
		{"superseded", func(t *testing.T, q *peer) { q.fail(t, wire.CodeSuperseded, "") }, "baton: resume refused", slog.LevelError},
		{"bad credential", func(t *testing.T, q *peer) { q.fail(t, wire.CodeBadCredential, "") }, "baton: resume refused", slog.LevelError},
		{"a bad answer", func(t *testing.T, q *peer) { q.waitingV3(t, 1, 7, 1, testCred) }, "baton: resume refused", slog.LevelError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var out bytes.Buffer
				var mu sync.Mutex
				h := slog.NewJSONHandler(&lockedWriter{w: &out, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug})
				rec := &recordLog{}
				moves := newMovedLog()
				c, pn := newPipeClient(t, []string{"a:1", "b:1"}, WithLease(moveLease), moves.option(),
					WithLogger(slog.New(teeHandler{h, rec})))
				l, p := holdV3(t, c, pn, 7)
				time.Sleep(time.Second)
				p.fail(t, wire.CodeNotLeader, "b:1")
				q := pn.accept(t)
				q.resume(t, true, 7, 1, testCred)
				time.Sleep(30 * time.Millisecond)
				tc.answer(t, q)
				synctest.Wait()
				var printed []string
				if levels, _ := rec.find("baton: moving the claim"); len(levels) != 1 || levels[0] != slog.LevelInfo {
					t.Errorf("moving the claim: logged at %v, want once at Info", levels)
				}
				if levels, _ := rec.find(tc.message); len(levels) != 1 || levels[0] != tc.level {
					t.Errorf("%q logged at %v, want once at %v", tc.message, levels, tc.level)
				}
				if tc.name == "moved" {
					mu.Lock()
					got := out.String()
					mu.Unlock()
					for _, want := range []string{`"msg":"baton: claim moved","lock":"jobs","from":"a:1","to":"b:1","attempts":1,"attempt":1,"took":30000000,"held":true`} {
						if !strings.Contains(got, want) {
							t.Errorf("the log has no %s:\n%s", want, got)
						}
					}
					mv := moves.next(t)
					printed = append(printed, fmt.Sprintf("%v %+v %#v %#v", mv, mv, mv, l))
				} else {
					<-l.Done()
					err := l.Err()
					printed = append(printed, err.Error(), fmt.Sprintf("%v %+v %#v", err, err, err))
				}
				l.Release()
				mu.Lock()
				printed = append(printed, out.String())
				mu.Unlock()
				for _, text := range printed {
					for _, form := range credentialForms(testCred) {
						if strings.Contains(text, form) {
							t.Errorf("the credential (as %q) is in:\n%s", form, text)
						}
					}
				}
			})
		})
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}

// teeHandler hands each record to both handlers.
type teeHandler struct {
	a slog.Handler
	b *recordLog
}

func (h teeHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h teeHandler) Handle(ctx context.Context, r slog.Record) error {
	h.b.Handle(ctx, r)
	return h.a.Handle(ctx, r)
}
func (h teeHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h teeHandler) WithGroup(string) slog.Handler      { return h }
