package clienttest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/server"
)

// recordLog is a slog handler that keeps "LEVEL message key=value ..." of
// every record.
type recordLog struct {
	mu    sync.Mutex
	lines []string
}

func (h *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordLog) WithGroup(string) slog.Handler            { return h }
func (h *recordLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	h.lines = append(h.lines, b.String())
	h.mu.Unlock()
	return nil
}

// find returns the first line that starts with prefix and contains every
// one of parts.
func (h *recordLog) find(prefix string, parts ...string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
next:
	for _, l := range h.lines {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		return l, true
	}
	return "", false
}

func (h *recordLog) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.lines, "\n")
}

// TestIntegrationLogger: with WithLogger, against real servers, the client
// logs the connection, a redirect by a node that is not the leader, the
// grant, heartbeats unanswered through a frozen link, and the loss with its
// cause.
func TestIntegrationLogger(t *testing.T) {
	t.Parallel()
	leader := batontest.StartServer(t)
	follower := batontest.StartServer(t, func(c *server.Config) {
		// A node that does not lead: NOT_LEADER, naming the leader.
		c.Replica = &batontest.Replica{Hint: func() string { return leader.Addr }}
	})
	// The follower first: it answers NOT_LEADER naming the leader, the
	// second address.
	log := &recordLog{}
	c := newTestClient(t, []string{follower.Addr, leader.Addr}, baton.WithLogger(slog.New(log)), baton.WithLease(time.Second))
	l := acquire(t, c, "logged")
	l.Release()
	for _, want := range []struct{ prefix, part string }{
		{"DEBUG baton: connected", "addr=" + follower.Addr},
		{"INFO baton: not the leader", "leader=" + leader.Addr},
		{"DEBUG baton: connected", "addr=" + leader.Addr},
		{"DEBUG baton: lock acquired", "token="},
		{"DEBUG baton: lock released", "lock=logged"},
	} {
		if _, ok := log.find(want.prefix, want.part); !ok {
			t.Errorf("no %q line with %q; log:\n%s", want.prefix, want.part, log)
		}
	}

	// Through a link that stalls: misses at Warn, then the loss.
	px := newProxy(t, leader.Addr)
	log2 := &recordLog{}
	c2 := newTestClient(t, []string{px.Addr()}, baton.WithLogger(slog.New(log2)), baton.WithLease(time.Second))
	l2 := acquire(t, c2, "frozen")
	px.Stall(faultproxy.Both)
	select {
	case <-l2.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lock was not lost through a frozen link")
	}
	if err := l2.Err(); !errors.Is(err, baton.ErrUnconfirmed) {
		t.Fatalf("Err() = %v, want ErrUnconfirmed", err)
	}
	l2.Release()
	if _, ok := log2.find("WARN baton: heartbeat unanswered", "lock=frozen", "lease=1s"); !ok {
		t.Errorf("no heartbeat miss logged; log:\n%s", log2)
	}
	if _, ok := log2.find("WARN baton: lock lost", "lock=frozen", "no confirmation"); !ok {
		t.Errorf("no loss logged; log:\n%s", log2)
	}
}

// TestNoLoggerLogsNothing: without WithLogger the client never touches
// slog's default logger.
func TestNoLoggerLogsNothing(t *testing.T) {
	srv := batontest.StartServer(t, func(c *server.Config) { c.Logger = slog.New(slog.DiscardHandler) })
	log := &recordLog{}
	old := slog.Default()
	slog.SetDefault(slog.New(log))
	t.Cleanup(func() { slog.SetDefault(old) })
	c := newTestClient(t, []string{srv.Addr})
	l := acquire(t, c, "quiet")
	if _, err := srv.Srv.ForceRelease("quiet"); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	l.Release()
	if s := log.String(); s != "" {
		t.Errorf("the default logger got:\n%s", s)
	}
}
