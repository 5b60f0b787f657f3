package cli

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// acquireConn sends ACQUIRE for name with lease on a new connection to addr
// and returns it with the type of the first reply; t.Cleanup closes it.
func acquireConn(t *testing.T, addr, name string, lease time.Duration) (net.Conn, wire.Type) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	b, err := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: uint32(lease.Milliseconds()), Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	h, _ := readFrame(t, conn)
	return conn, h.Type
}

// TestBinaryCrashGrace: after kill -9 of a server whose session held a lock
// with a 1500ms lease, the restarted server grants nothing for 1500ms (the
// old holder may still believe it holds); after SIGTERM, whose holder
// closed on SHUTDOWN, it grants at once.
func TestBinaryCrashGrace(t *testing.T) {
	t.Parallel()
	const lease = 1500 * time.Millisecond
	dataDir := t.TempDir()
	cmd, addr := startServeBinary(t, dataDir)
	if _, typ := acquireConn(t, addr, "jobs", lease); typ != wire.TypeAcquired {
		t.Fatalf("first run: got %v, want ACQUIRED", typ)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	restart := time.Now()
	cmd, addr = startServeBinary(t, dataDir)
	conn, typ := acquireConn(t, addr, "jobs", time.Minute)
	if typ != wire.TypeWaiting {
		t.Fatalf("after kill -9: got %v, want WAITING (the crash grace period)", typ)
	}
	h, p := readFrame(t, conn) // within 5s: the grace period is 1.5s
	if h.Type != wire.TypeAcquired {
		t.Fatalf("after kill -9: got %v, want the push ACQUIRED", h.Type)
	}
	if push, _, err := wire.DecodeAcquired(p); err != nil || !push {
		t.Fatalf("after kill -9: ACQUIRED push=%v (%v), want a push", push, err)
	}
	if at := time.Since(restart); at < lease {
		t.Fatalf("after kill -9: granted %v after the restart began, want at least the lease of %v", at, lease)
	}

	// SIGTERM: the holder closes on SHUTDOWN, as every client does. (One
	// that stays open is listed: its name waits for its time left,
	// TestBinaryStandaloneSIGTERMKeepsClaims.)
	cmd.Process.Signal(syscall.SIGTERM)
	if h, p := readFrame(t, conn); h.Type != wire.TypeError || wire.Code(p[0]) != wire.CodeShutdown {
		t.Fatalf("after SIGTERM: got %v % x, want ERROR SHUTDOWN", h.Type, p)
	}
	conn.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("baton serve after SIGTERM: %v, want exit 0", err)
	}
	_, addr = startServeBinary(t, dataDir)
	if _, typ := acquireConn(t, addr, "jobs", lease); typ != wire.TypeAcquired {
		t.Fatalf("after SIGTERM: got %v, want ACQUIRED at once", typ)
	}
}
