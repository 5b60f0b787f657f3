package baton

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"
)

// The client's log (WithLogger): connects and failed dials, redirects,
// reconnections, heartbeat misses, moves and their refusals, grants and
// ends. Nothing is logged without a logger, and nothing is formatted for
// it. No record carries a credential: the claim's is never an attribute,
// and wire.Credential prints redacted wherever it goes.

func logAt(l *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) {
	if l != nil {
		l.LogAttrs(context.Background(), level, msg, attrs...)
	}
}

const levelDebug = slog.LevelDebug

func attrLock(name string) slog.Attr { return slog.String("lock", name) }
func attrAddr(addr string) slog.Attr { return slog.String("addr", addr) }
func attrErr(err error) slog.Attr    { return slog.Any("err", err) }

// attrToken is a token as text: a JSON number would lose the low bits of
// a token above 2^53.
func attrToken(token uint64) slog.Attr { return slog.String("token", strconv.FormatUint(token, 10)) }

// logMiss reports a request the server has not answered within a beat
// (lease/4): the margin before the client gives the lock up is shrinking.
func (s *claim) logMiss(waited, left time.Duration) {
	logAt(s.log, slog.LevelWarn, "baton: heartbeat unanswered",
		attrLock(s.name), attrAddr(s.addr),
		slog.Duration("waited", waited), slog.Duration("lease", s.lease),
		slog.Duration("gives_up_in", max(left, 0)))
}

// logEnd reports the end of a claim that held the lock: a loss at Warn
// (at Error when it says that a premise broke: SUPERSEDED, or the
// credential used by another connection), a release or the maximum hold
// at Debug and Info.
func (s *claim) logEnd() {
	if s.log == nil || !s.grantSent.Load() {
		return
	}
	attrs := []slog.Attr{attrLock(s.name), attrAddr(s.addr)}
	switch {
	case s.err == ErrReleased:
		logAt(s.log, slog.LevelDebug, "baton: lock released", attrs...)
	case errors.Is(s.err, ErrMaxHoldReached):
		logAt(s.log, slog.LevelInfo, "baton: maximum hold reached; lock released", append(attrs, slog.Duration("max_hold", s.maxHold))...)
	default:
		level := slog.LevelWarn
		if errors.Is(s.err, ErrSuperseded) || errors.Is(s.err, ErrMoved) {
			level = slog.LevelError
		}
		logAt(s.log, level, "baton: lock lost", append(attrs, attrErr(s.err))...)
	}
}
