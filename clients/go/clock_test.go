package baton

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// stallHandler is a slog handler whose Handle blocks until released: given
// to WithLogger, it stalls the session's goroutine at its first log record
// (a heartbeat miss), as a pause would, while the test's goroutine runs on.
type stallHandler struct {
	once    sync.Once
	stalled chan struct{} // closed when Handle is first entered
	release chan struct{}
}

func newStallHandler() *stallHandler {
	return &stallHandler{stalled: make(chan struct{}), release: make(chan struct{})}
}

func (h *stallHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *stallHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *stallHandler) WithGroup(string) slog.Handler            { return h }
func (h *stallHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	h.once.Do(func() { close(h.stalled) })
	<-h.release
	return nil
}

// TestErrReadsTheClock: the questions about a lock read the clock. The
// session's goroutine is stalled before the deadline (in a log call, for
// lack of a way to pause one goroutine); past the deadline, Lock.Err, the
// context's Err and context.Cause, Done and ValidUntil all report the end
// at once, without that goroutine; when it runs again it closes the
// connection, and Release reports the same error.
func TestErrReadsTheClock(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []Option
		askAt   time.Duration // after the grant
		is      error
		message string
	}{
		{"deadline", nil, 9 * time.Second, ErrUnconfirmed,
			`lock "jobs" lost: no confirmation from the server for 8s (0.8 × lease 10s)`},
		{"maximum hold", []Option{WithMaxHold(6 * time.Second)}, 6500 * time.Millisecond, ErrMaxHoldReached,
			`lock "jobs" lost: maximum hold reached: held for 6s`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newStallHandler()
				opts := append([]Option{WithLease(10 * time.Second), WithLogger(slog.New(h))}, tc.opts...)
				c, pn := newPipeClient(t, []string{"pipe:1"}, opts...)
				grantedAt := time.Now()
				l, p := holdLock(t, c, pn, 7)
				p.next(t, wire.TypeHeartbeat) // at lease/4, left unanswered
				<-h.stalled                   // the miss, logged at lease/2: the session's goroutine stops there
				if err := l.Err(); err != nil {
					t.Fatalf("Err() at %v = %v, want nil", time.Since(grantedAt), err)
				}
				time.Sleep(grantedAt.Add(tc.askAt).Sub(time.Now()))

				err := l.Err()
				if !errors.Is(err, ErrLockLost) || !errors.Is(err, tc.is) || err.Error() != tc.message {
					t.Errorf("Err() %v after the grant, its goroutine stalled = %v, want %q", tc.askAt, err, tc.message)
				}
				if got := context.Cause(l.Context()); got != err {
					t.Errorf("context.Cause = %v, want %v", got, err)
				}
				if l.Context().Err() == nil {
					t.Errorf("the context's Err() is nil")
				}
				select {
				case <-l.Done():
				default:
					t.Errorf("Done is not closed after Err reported the loss")
				}
				if v := l.ValidUntil(); !v.IsZero() {
					t.Errorf("ValidUntil() = %v, want the zero Time", v)
				}
				if got := l.Err(); got != err {
					t.Errorf("Err() asked again = %v, want the same %v", got, err)
				}

				close(h.release)
				p.closed(t) // the session's goroutine ends the connection
				if got := l.Release(); got != err {
					t.Errorf("Release() = %v, want %v", got, err)
				}
			})
		})
	}
}

// TestValidUntil: ValidUntil is 0.8 × lease after the send of the last
// request the server answered, no later than the end of a maximum hold,
// and the zero Time once the lock has ended.
func TestValidUntil(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maxHold time.Duration
	}{
		{"lease", 0},
		{"maximum hold", 9 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const lease = 10 * time.Second
				c, pn := newPipeClient(t, []string{"pipe:1"}, WithLease(lease), WithMaxHold(tc.maxHold))
				start := time.Now()
				l, p := holdLock(t, c, pn, 7)
				until := func(sentAt time.Time) time.Time {
					v := sentAt.Add(lease * 8 / 10)
					if tc.maxHold > 0 {
						v = earlier(v, start.Add(tc.maxHold))
					}
					return v
				}
				if got, want := l.ValidUntil(), until(start); !got.Equal(want) {
					t.Errorf("after the grant: ValidUntil() = +%v, want +%v", got.Sub(start), want.Sub(start))
				}
				hb := p.next(t, wire.TypeHeartbeat)
				time.Sleep(time.Second) // the reply's round trip
				p.acquired(t, 7)
				synctest.Wait()
				if got, want := l.ValidUntil(), until(hb.at); !got.Equal(want) {
					t.Errorf("after a heartbeat sent at +%v: ValidUntil() = +%v, want +%v",
						hb.at.Sub(start), got.Sub(start), want.Sub(start))
				}
				l.Release()
				if v := l.ValidUntil(); !v.IsZero() {
					t.Errorf("after Release: ValidUntil() = %v, want the zero Time", v)
				}
			})
		})
	}
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
