package server_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// bulkSessions is how many sessions of one name the tests below end or
// grant at once: several steps of the server's, and two descriptors each
// in this one process.
const bulkSessions = 2000

// crowd connects n shared claims of name (limit 65535), each answered
// ACQUIRED (holding) or WAITING.
func crowd(t *testing.T, ts *batontest.Server, name string, n int, want wire.Type) []*batontest.Conn {
	t.Helper()
	cs := make([]*batontest.Conn, n)
	for i := range cs {
		cs[i] = batontest.Dial(t, ts.Addr)
		cs[i].AcquireV2(name, longLease, true, 65535, false, "crowd-"+strconv.Itoa(i))
	}
	for i, c := range cs {
		if f := c.ReadFrame(frameWait); f.Type != want {
			t.Fatalf("claim %d of %q: got %v, want %v", i, name, f, want)
		}
	}
	return cs
}

// probeUntil acquires and releases locks of its own (probe-0, probe-1,
// ...), one session after the other, until done is closed, and returns
// how many it took. Each grant is an event, and needs the server's mutex.
func probeUntil(t *testing.T, ts *batontest.Server, done <-chan struct{}) int {
	t.Helper()
	for n := 0; ; n++ {
		select {
		case <-done:
			return n
		default:
		}
		c := batontest.Dial(t, ts.Addr)
		c.Acquire("probe-"+strconv.Itoa(n), longLease, false, "probe")
		if f := c.ReadFrame(frameWait); f.Type != wire.TypeAcquired {
			t.Fatalf("probe %d: got %v, want ACQUIRED", n, f)
		}
		c.Conn.Close()
	}
}

// drainEvents reads every event of sub published so far.
func drainEvents(t *testing.T, sub *server.Subscription) []server.Event {
	t.Helper()
	var all []server.Event
	for {
		evs, _, err := sub.Read(nil, 1000)
		if err != nil {
			t.Fatalf("events: %v", err)
		}
		if len(evs) == 0 {
			return all
		}
		all = append(all, evs...)
	}
}

// interleaved counts the probe's grants between the first and the last
// event of lock name with type typ, and returns those events of name.
func interleaved(evs []server.Event, name, typ string) (probes int, bulk []server.Event) {
	first, last := -1, -1
	for i, e := range evs {
		if e.Lock == name && e.Type == typ {
			if first < 0 {
				first = i
			}
			last = i
			bulk = append(bulk, e)
		}
	}
	for i := first + 1; first >= 0 && i < last; i++ {
		if strings.HasPrefix(evs[i].Lock, "probe-") && evs[i].Type == server.EventGranted {
			probes++
		}
	}
	return probes, bulk
}

// TestReleaseOfManyHoldersIsSteps: an operator's release of a name with
// thousands of holders ends them in steps, each one hold of the mutex that
// grants, and the other sessions come and go between the steps: another
// session's grant lands between the first and the last holder's end (in
// one critical section, none could). The release still ends exactly its
// holders, in grant order, each told FORCE_RELEASED.
func TestReleaseOfManyHoldersIsSteps(t *testing.T) {
	ts := batontest.StartServer(t)
	holders := crowd(t, ts, "big", bulkSessions, wire.TypeAcquired)
	sub := ts.Srv.Subscribe(server.SubscribeRequest{}).Sub
	defer sub.Close()

	done := make(chan struct{})
	var ended []server.SessionView
	var err error
	go func() {
		defer close(done)
		ended, err = ts.Srv.ForceReleaseAll("big")
	}()
	probes := probeUntil(t, ts, done)
	if err != nil {
		t.Fatalf("ForceReleaseAll: %v", err)
	}
	if len(ended) != bulkSessions {
		t.Fatalf("released %d holders, want %d", len(ended), bulkSessions)
	}
	for i := 1; i < len(ended); i++ {
		if ended[i].Token <= ended[i-1].Token {
			t.Fatalf("released holders out of grant order: token %d after %d", ended[i].Token, ended[i-1].Token)
		}
	}
	between, ends := interleaved(drainEvents(t, sub), "big", server.EventForceReleased)
	t.Logf("%d holders released; the probe took %d locks meanwhile, %d of them between the first end and the last", len(ends), probes, between)
	if len(ends) != bulkSessions {
		t.Fatalf("got %d force_released events of big, want %d", len(ends), bulkSessions)
	}
	if between == 0 {
		t.Fatalf("no other session was served between the first and the last of %d holders' ends (the probe took %d locks meanwhile): the release is one critical section", bulkSessions, probes)
	}
	for _, i := range []int{0, bulkSessions - 1} {
		if f := holders[i].ReadFrame(frameWait); f.Type != wire.TypeError || f.Err == nil || f.Err.Code != wire.CodeForceReleased {
			t.Fatalf("holder %d: got %v, want ERROR FORCE_RELEASED", i, f)
		}
	}
}

// TestMassPromotionIsSteps: a writer that leaves before thousands of
// readers lets them in in steps, each one hold of the mutex that grants:
// another session's grant lands between the first reader's grant and the
// last (in one critical section, none could). The readers are granted in
// queue order, with rising tokens, each pushed its ACQUIRED.
func TestMassPromotionIsSteps(t *testing.T) {
	ts := batontest.StartServer(t)
	writer, _ := hold(t, ts, "rw", longLease)
	readers := crowd(t, ts, "rw", bulkSessions, wire.TypeWaiting)
	sub := ts.Srv.Subscribe(server.SubscribeRequest{}).Sub
	defer sub.Close()

	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if lv, _ := ts.Srv.Lock("rw"); len(lv.Holders) == bulkSessions {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	writer.Conn.Close()
	probes := probeUntil(t, ts, done)
	pushed := map[uint64]bool{}
	for i, r := range readers {
		f := r.ReadFrame(frameWait)
		if f.Type != wire.TypeAcquired || !f.Push || pushed[f.Token] {
			t.Fatalf("reader %d: got %v, want an ACQUIRED push with a token of its own", i, f)
		}
		pushed[f.Token] = true
	}
	between, grants := interleaved(drainEvents(t, sub), "rw", server.EventGranted)
	t.Logf("%d readers granted; the probe took %d locks meanwhile, %d of them between the first grant and the last", len(grants), probes, between)
	if len(grants) != bulkSessions {
		t.Fatalf("got %d granted events of rw, want %d", len(grants), bulkSessions)
	}
	// The grants, in the order of the table's decisions: rising tokens,
	// each one pushed to its reader.
	for i, e := range grants {
		if !pushed[e.Session.Token] || (i > 0 && e.Session.Token <= grants[i-1].Session.Token) {
			t.Fatalf("grant %d of rw: token %d, after %d, pushed %v: want rising tokens, each pushed", i, e.Session.Token, grants[max(i-1, 0)].Session.Token, pushed[e.Session.Token])
		}
	}
	if between == 0 {
		t.Fatalf("no other session was served between the first and the last of %d readers' grants (the probe took %d locks meanwhile): the promotion is one critical section", bulkSessions, probes)
	}
}
