package server_test

import (
	"net"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// TestReplicatedTerms: a replicated server answers NOT_LEADER (with the
// hint) until BeginTerm; EndTerm ends holder and waiter with NOT_LEADER at
// once and promotes nobody on the way out; a new term starts empty.
func TestReplicatedTerms(t *testing.T) {
	t.Parallel()
	hint := "10.0.0.2:7070"
	ts := batontest.StartServer(t, func(c *server.Config) {
		c.Replica = &batontest.Replica{Hint: func() string { return hint }}
	})
	if ts.Srv.Ready() || ts.Srv.Serving() {
		t.Fatal("a replicated server is ready before its first term")
	}
	c := batontest.Dial(t, ts.Addr)
	c.Acquire("jobs", longLease, false, "")
	if f := c.ReadFrame(5 * time.Second); f.Type != wire.TypeError || f.Err.Code != wire.CodeNotLeader || f.Err.Msg != hint {
		t.Fatalf("before BeginTerm: got %v, want ERROR NOT_LEADER %q", f, hint)
	}

	ts.Srv.BeginTerm(0, server.Carried{})
	if !ts.Srv.Ready() {
		t.Fatal("not ready after BeginTerm")
	}
	h := batontest.Dial(t, ts.Addr)
	h.Acquire("jobs", longLease, false, "")
	if f := h.ReadFrame(5 * time.Second); f.Type != wire.TypeAcquired {
		t.Fatalf("holder: got %v", f)
	}
	w := batontest.Dial(t, ts.Addr)
	w.Acquire("jobs", longLease, false, "")
	if f := w.ReadFrame(5 * time.Second); f.Type != wire.TypeWaiting {
		t.Fatalf("waiter: got %v", f)
	}
	hint = ""
	holders, closed := ts.Srv.EndTerm(server.ReasonNotLeader, "")
	if holders != 1 {
		t.Fatalf("EndTerm: %d holders, want 1", holders)
	}
	for name, conn := range map[string]*batontest.Conn{"holder": h, "waiter": w} {
		if f := conn.ReadFrame(5 * time.Second); f.Type != wire.TypeError || f.Err.Code != wire.CodeNotLeader {
			t.Fatalf("%s after EndTerm: got %v, want ERROR NOT_LEADER (and no promotion)", name, f)
		}
		conn.ExpectClosed(5 * time.Second)
	}
	h.Conn.Close()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the holder's close was not seen")
	}
	if ts.Srv.Ready() {
		t.Fatal("ready after EndTerm")
	}

	// A new term with a grace: WAITING, NOWAIT gets BUSY, then the push.
	ts.Srv.BeginTerm(300*time.Millisecond, server.Carried{})
	n := batontest.Dial(t, ts.Addr)
	n.Acquire("jobs", longLease, false, "")
	if f := n.ReadFrame(5 * time.Second); f.Type != wire.TypeWaiting || f.Position != 1 {
		t.Fatalf("during the grace: got %v, want WAITING 1 (a fresh table)", f)
	}
	nw := batontest.Dial(t, ts.Addr)
	nw.Acquire("other", longLease, true, "")
	if f := nw.ReadFrame(5 * time.Second); f.Type != wire.TypeError || f.Err.Code != wire.CodeBusy {
		t.Fatalf("NOWAIT during the failover grace: got %v, want ERROR BUSY", f)
	}
	if f := n.ReadFrame(5 * time.Second); f.Type != wire.TypeAcquired || !f.Push {
		t.Fatalf("after the grace: got %v, want the ACQUIRED push", f)
	}
}

// TestEndTermSeesResetClose: a holder whose close is a reset (the clients
// release by reset, and one may release just as the ERROR comes) counts as
// gone for the drain of a planned handover, as a FIN does; otherwise the
// next leader would wait a whole lease bound for a client that is gone.
func TestEndTermSeesResetClose(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, func(c *server.Config) { c.Replica = &batontest.Replica{} })
	ts.Srv.BeginTerm(0, server.Carried{})
	h := batontest.Dial(t, ts.Addr)
	h.Acquire("jobs", longLease, false, "")
	if f := h.ReadFrame(5 * time.Second); f.Type != wire.TypeAcquired {
		t.Fatalf("holder: got %v", f)
	}
	holders, closed := ts.Srv.EndTerm(server.ReasonShutdown, "")
	if holders != 1 {
		t.Fatalf("EndTerm: %d holders, want 1", holders)
	}
	start := time.Now()
	h.Conn.(*net.TCPConn).SetLinger(0)
	h.Conn.Close()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the holder's reset was never seen")
	}
	// Without the reset counted, only the drain's own time limit (linger,
	// at most 1 s, + 1 s) would close the channel.
	if el := time.Since(start); el > 1500*time.Millisecond {
		t.Errorf("the holder's reset was seen after %v, want at once (not the drain's 2 s limit)", el)
	}
}
