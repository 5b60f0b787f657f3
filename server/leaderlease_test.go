package server_test

import (
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// leaderServer starts a replicated server that leads (BeginTerm, no grace)
// while *may is true, as a cluster leader's Replica.MayServe says; lost
// counts Replica.TermLost calls.
func leaderServer(t *testing.T, park bool, may *atomic.Bool, lost *atomic.Int32) *batontest.Server {
	t.Helper()
	may.Store(true)
	ts := batontest.StartServer(t, func(c *server.Config) {
		c.ParkIdle = park
		c.Replica = &batontest.Replica{
			May:  func(time.Time) bool { return may.Load() },
			Lost: func() { lost.Add(1) },
		}
	})
	ts.Srv.BeginTerm(0, server.Carried{})
	return ts
}

// TestFailsClosedWithoutLeaderLease: once a replicated leader may no
// longer grant or confirm (its leader lease ran out, as after a pause),
// nothing is confirmed or granted: a holder's heartbeat, a waiter's
// promotion after the holder's close, and a new ACQUIRE each meet ERROR
// NOT_LEADER; every session ends, and the node is told once.
func TestFailsClosedWithoutLeaderLease(t *testing.T) {
	t.Parallel()
	for _, park := range []bool{false, true} {
		for _, how := range []string{"heartbeat", "close", "acquire"} {
			name := how
			if park {
				name += "/parked"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				var may atomic.Bool
				var lost atomic.Int32
				ts := leaderServer(t, park, &may, &lost)
				h, _ := hold(t, ts, "jobs", longLease)
				w := queue(t, ts, "jobs", longLease, 1)
				if park && runtime.GOOS == "linux" {
					eventuallyMetric(t, ts.Srv.Registry(), "baton_connections_parked", "", 2)
				}
				may.Store(false)
				switch how {
				case "heartbeat":
					h.Heartbeat()
					if f := h.ReadFrame(frameWait); f.Type != wire.TypeError || f.Err.Code != wire.CodeNotLeader {
						t.Fatalf("holder's heartbeat after the lease ran out: got %v, want ERROR NOT_LEADER", f)
					}
				case "close":
					h.Conn.Close()
				case "acquire":
					c := batontest.Dial(t, ts.Addr)
					c.Acquire("free", longLease, false, "")
					if f := c.ReadFrame(frameWait); f.Type != wire.TypeError || f.Err.Code != wire.CodeNotLeader {
						t.Fatalf("ACQUIRE of a free lock after the lease ran out: got %v, want ERROR NOT_LEADER", f)
					}
				}
				if f := w.ReadFrame(frameWait); f.Type != wire.TypeError || f.Err.Code != wire.CodeNotLeader {
					t.Fatalf("waiter after the lease ran out (%s): got %v, want ERROR NOT_LEADER, never ACQUIRED", how, f)
				}
				batontest.Eventually(t, frameWait, func() bool { return lost.Load() == 1 }, "TermLost called %d times, want 1", lost.Load())
				if ts.Srv.Serving() {
					t.Fatal("the server still serves after failing closed")
				}
				late := batontest.Dial(t, ts.Addr)
				late.Acquire("jobs", longLease, false, "")
				expectError(t, late, wire.CodeNotLeader)
			})
		}
	}
}

// TestMaxLease: a lease above Config.MaxLease is refused with BAD_REQUEST
// naming both; one at the maximum is granted.
func TestMaxLease(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, func(c *server.Config) { c.MaxLease = time.Minute })
	c := batontest.Dial(t, ts.Addr)
	c.Acquire("a", time.Minute+time.Millisecond, false, "")
	if e := expectError(t, c, wire.CodeBadRequest); !strings.Contains(e.Msg, "1m0.001s") || !strings.Contains(e.Msg, "1m0s") {
		t.Fatalf("message %q, want the lease and the maximum", e.Msg)
	}
	hold(t, ts, "a", time.Minute)
	bad := server.DefaultConfig()
	bad.NextToken, bad.MaxLease = func() uint64 { return 1 }, -time.Second
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "max-lease") {
		t.Fatalf("negative MaxLease: got %v, want an error naming max-lease", err)
	}
}
