package clienttest

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/testcerts"
	"github.com/batonlock/baton/server"
)

// TestReleaseReset: Release resets the connection by default, so the
// client keeps no TIME_WAIT socket, and the server hands the lock over as
// it does on a close (it counts the end as "reset"); WithNormalClose
// closes with a FIN instead and leaves the client's socket in TIME_WAIT.
// Over TLS the reset comes without close_notify, and is a release all the
// same.
func TestReleaseReset(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	serverTLS := &tls.Config{Certificates: []tls.Certificate{ca.Server(t).TLS}}
	clientTLS := baton.WithTLSConfig(&tls.Config{RootCAs: ca.Pool()})
	for _, tt := range []struct {
		name   string
		tls    bool
		opts   []baton.Option
		reason string // how the server saw the holder's session end
		socket string // what becomes of the client's socket: gone, TIME_WAIT, or "" (not checked)
	}{
		{"default", false, nil, "reset", "gone"},
		{"normal close", false, []baton.Option{baton.WithNormalClose(true)}, "closed", "TIME_WAIT"},
		{"default over TLS", true, []baton.Option{clientTLS}, "reset", "gone"},
		// The server's close sends close_notify to the half-closed client
		// socket, which the client's kernel answers with a reset: no
		// TIME_WAIT either, but by the server's doing, not checked here.
		{"normal close over TLS", true, []baton.Option{clientTLS, baton.WithNormalClose(true)}, "closed", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts := batontest.StartServer(t, func(c *server.Config) {
				if tt.tls {
					c.TLS = serverTLS
				}
			})
			holder := newTestClient(t, []string{ts.Addr}, tt.opts...)
			waiter := newTestClient(t, []string{ts.Addr}, tt.opts...)
			l := acquire(t, holder, "rst")
			local, remote := endpoints(t, ts, "rst")
			w := acquireLater(t, ts.Srv, waiter, "rst")

			before := endedCount(ts, tt.reason)
			if err := l.Release(); err != nil {
				t.Fatalf("Release: %v", err)
			}
			select {
			case r := <-w:
				if r.err != nil {
					t.Fatalf("waiter: %v", r.err)
				}
				if r.l.Token() <= l.Token() {
					t.Fatalf("waiter's token %d is not above the holder's %d", r.l.Token(), l.Token())
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the waiter was not granted within 5s of the release")
			}
			batontest.Eventually(t, 5*time.Second, func() bool { return endedCount(ts, tt.reason) == before+1 },
				"the server did not count the holder's end as %q (%v before, %v now)", tt.reason, before, endedCount(ts, tt.reason))

			switch tt.socket {
			case "TIME_WAIT":
				// The FIN of the server's own close completes it.
				batontest.Eventually(t, 5*time.Second, func() bool { return tcpState(t, local, remote) == tcpTimeWait },
					"the client's socket %d->%d is in state %s, want TIME_WAIT", local, remote, stateName(tcpState(t, local, remote)))
			case "gone":
				// A reset destroys the socket in close itself.
				if st := tcpState(t, local, remote); st != 0 {
					t.Fatalf("after Release the client's socket %d->%d is still there, in state %s", local, remote, stateName(st))
				}
			}
		})
	}
}

// TestWaiterGivesUpWithReset: an Acquire that gives up its wait resets its
// connection too: the server drops it from the queue at once, and the
// client keeps no socket.
func TestWaiterGivesUpWithReset(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	c := newTestClient(t, []string{ts.Addr})
	acquire(t, c, "rst/wait")
	waiter := newTestClient(t, []string{ts.Addr})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, "rst/wait")
		done <- err
	}()
	batontest.Eventually(t, 5*time.Second, func() bool {
		v, _ := ts.Srv.Lock("rst/wait")
		return len(v.Waiters) == 1
	}, "the waiter is not queued")
	var local, remote int
	if v, _ := ts.Srv.Lock("rst/wait"); true {
		_, p, _ := net.SplitHostPort(v.Waiters[0].Remote)
		local, _ = strconv.Atoi(p)
		_, p, _ = net.SplitHostPort(ts.Addr)
		remote, _ = strconv.Atoi(p)
	}
	before := endedCount(ts, "reset")
	cancel()
	if err := <-done; err == nil {
		t.Fatal("Acquire returned a lock after its context was cancelled")
	}
	if st := tcpState(t, local, remote); st != 0 {
		t.Fatalf("after giving up, the waiter's socket %d->%d is still there, in state %s", local, remote, stateName(st))
	}
	batontest.Eventually(t, 5*time.Second, func() bool {
		v, _ := ts.Srv.Lock("rst/wait")
		return len(v.Waiters) == 0 && endedCount(ts, "reset") == before+1
	}, "the server did not drop the waiter on its reset")
}

// TestServerEndClosesNormally: when the server ends the session (here
// with ERROR SHUTDOWN at the end of a leader's term), the client answers
// with a FIN, not a reset: the server waits for that close to know that
// the holder has gone (a cluster's handover commits a zero bound only
// then), and a reset would make it wait out its drain instead.
func TestServerEndClosesNormally(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	// A claim of version 3 moves on SHUTDOWN instead of ending; the close
	// of its ended connection is the same FIN (the move tests).
	l := acquire(t, newTestClient(t, []string{ts.Addr}, baton.WithResume(false)), "rst/end")
	start := time.Now()
	holders, closed := ts.Srv.EndTerm(server.ReasonShutdown, "test: leader handing over")
	if holders != 1 {
		t.Fatalf("EndTerm saw %d holders, want 1", holders)
	}
	<-closed // at the latest after the server's drain (1s) and a second
	<-l.Done()
	// The FIN closes it at once; a reset, or no close, only after the
	// drain's 2s. Half of that is the margin for a loaded machine.
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the server learned of the holder's close after %v: the client did not answer ERROR with a FIN", d)
	}
}

// endpoints are the local and remote ports of the connection of name's
// holder, as the server sees it.
func endpoints(t *testing.T, ts *batontest.Server, name string) (local, remote int) {
	t.Helper()
	v, ok := ts.Srv.Lock(name)
	if !ok || v.Holder == nil {
		t.Fatalf("lock %q has no holder", name)
	}
	return portOf(t, v.Holder.Remote), portOf(t, ts.Addr)
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return port
}

func endedCount(ts *batontest.Server, reason string) float64 {
	mfs, err := ts.Srv.Registry().Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "baton_sessions_ended_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "reason" && lp.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

// TCP states as /proc/net/tcp shows them (include/net/tcp_states.h).
const (
	tcpEstablished = 0x01
	tcpFinWait2    = 0x05
	tcpTimeWait    = 0x06
	tcpClose       = 0x07
)

func stateName(st int) string {
	switch st {
	case 0:
		return "none (gone)"
	case tcpEstablished:
		return "ESTABLISHED"
	case tcpFinWait2:
		return "FIN_WAIT2"
	case tcpTimeWait:
		return "TIME_WAIT"
	case tcpClose:
		return "CLOSE"
	}
	return fmt.Sprintf("0x%02X", st)
}

// tcpState is the state of the socket with local port local and remote
// port remote, from /proc/net/tcp and tcp6; 0 if there is none.
func tcpState(t *testing.T, local, remote int) int {
	t.Helper()
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if st := tcpStateIn(t, f, local, remote); st != 0 {
			return st
		}
	}
	return 0
}

func tcpStateIn(t *testing.T, file string, local, remote int) int {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		if os.IsNotExist(err) {
			return 0
		}
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		// sl local_address rem_address st ...; addresses as hex IP:PORT.
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		if hexPort(fields[1]) == local && hexPort(fields[2]) == remote {
			st, _ := strconv.ParseInt(fields[3], 16, 32)
			return int(st)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return 0
}

func hexPort(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	p, _ := strconv.ParseInt(addr[i+1:], 16, 32)
	return int(p)
}
