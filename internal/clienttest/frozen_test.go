package clienttest

import (
	"context"
	"net"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
)

// TestClientLeavesFrozenNode is a client bug the harness found: a node that
// accepts connections but never answers (SIGSTOP, a hung process, a frozen
// VM: the kernel still completes the handshake) trapped a client. The
// session ended unconfirmed after 0.8 × lease and Acquire retried at once on
// the same address, for ever; it now moves on to the next address, as after
// SHUTDOWN or NOT_LEADER. In the fault schedule this made the first grant
// after a SIGSTOP of the leader wait for the SIGCONT (3 s), not election +
// grace (about 2 s) as after kill -9; the cluster fault harness found it.
func TestClientLeavesFrozenNode(t *testing.T) {
	frozen, err := net.Listen("tcp", "127.0.0.1:0") // never accepts: the kernel queues the handshakes
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	good := batontest.StartServer(t)
	c, err := baton.New([]string{frozen.Addr().String(), good.Addr}, baton.WithLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The first attempt may spend 0.8 × lease on the frozen node; the
	// second must go to the good one.
	const within = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	start := time.Now()
	l, err := c.Acquire(ctx, "frozen")
	if err != nil {
		t.Fatalf("Acquire with a frozen node first and a good one second: %v after %v, want the lock from the good node within %v",
			err, time.Since(start).Round(time.Millisecond), within)
	}
	l.Release()
}
