package server

import (
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// reserveSessions is how many spare descriptors the child of
// TestReserveServesSessionsWhenFull holds, and so how many sessions it
// must serve with every other descriptor taken.
const reserveSessions = 8

// TestReserveServesSessionsWhenFull: with every descriptor of the process
// taken by something else (here files; in production, say, idle ops
// connections), the protocol listener still admits as many sessions as it
// holds spare descriptors, at once, not after a backoff. The server runs
// in a child process (this test again), which fills its descriptor table.
func TestReserveServesSessionsWhenFull(t *testing.T) {
	if os.Getenv("BATON_TEST_RESERVE_CHILD") == "1" {
		reserveChild(t)
		return
	}
	child := startChild(t, "TestReserveServesSessionsWhenFull", "BATON_TEST_RESERVE_CHILD=1")
	addr, logs := child.Addr(t), child.Logs
	for i := range reserveSessions {
		nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		frame, _ := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 30000, Name: fmt.Sprint("full-", i)})
		nc.Write(frame)
		// Well within the first backoff steps' sum: served from the
		// reserve, not by a retry once something closed.
		nc.SetReadDeadline(time.Now().Add(2 * time.Second))
		var reply [12]byte
		if _, err := io.ReadFull(nc, reply[:]); err != nil || wire.Type(reply[0]) != wire.TypeAcquired {
			t.Fatalf("session %d of %d with every descriptor taken: reply % x, %v; want ACQUIRED; %s", i+1, reserveSessions, reply, err, logs)
		}
	}
}

func reserveChild(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ReserveFDs = reserveSessions
	s, ln, nc := childServer(t, cfg)
	// Every free descriptor taken, as idle ops connections would take them.
	var hogs []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		hogs = append(hogs, f)
	}
	fmt.Fprintln(os.Stderr, "child: took", len(hogs), "descriptors")
	awaitParent(ln)
	for _, f := range hogs {
		f.Close()
	}
	nc.Close()
	s.Shutdown(t.Context())
}
