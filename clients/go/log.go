package baton

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// The client's log (WithLogger): connects and failed dials, redirects,
// reconnections, heartbeat misses, grants and ends. Nothing is logged
// without a logger, and nothing is formatted for it.

func logAt(l *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) {
	if l != nil {
		l.LogAttrs(context.Background(), level, msg, attrs...)
	}
}

// logMiss reports a request the server has not answered within a beat
// (lease/4): the margin before the client gives the lock up is shrinking.
func (s *session) logMiss(waited, left time.Duration) {
	logAt(s.log, slog.LevelWarn, "baton: heartbeat unanswered",
		slog.String("lock", s.name), slog.String("addr", s.addr),
		slog.Duration("waited", waited), slog.Duration("lease", s.sched.lease),
		slog.Duration("gives_up_in", max(left, 0)))
}

// logEnd reports the end of a session that held the lock: a loss at Warn,
// a release or the maximum hold at Debug and Info.
func (s *session) logEnd() {
	if s.log == nil || !s.grantSent.Load() {
		return
	}
	attrs := []slog.Attr{slog.String("lock", s.name), slog.String("addr", s.addr)}
	switch {
	case s.err == ErrReleased:
		logAt(s.log, slog.LevelDebug, "baton: lock released", attrs...)
	case errors.Is(s.err, ErrMaxHoldReached):
		logAt(s.log, slog.LevelInfo, "baton: maximum hold reached; lock released", append(attrs, slog.Duration("max_hold", s.maxHold))...)
	default:
		logAt(s.log, slog.LevelWarn, "baton: lock lost", append(attrs, slog.Any("err", s.err))...)
	}
}
