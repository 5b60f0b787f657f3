//go:build unix

package cli

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/runner"
)

// v3Holder is a scripted server of protocol version 3 for one claim: it
// grants with a credential, answers heartbeats, and ends the connection
// as a test asks.
type v3Holder struct {
	conn  net.Conn
	token uint64
	mu    sync.Mutex // one writer at a time
	done  chan struct{}
}

// testCredential is the scripted server's credential: opaque bytes the
// client carries back unchanged.
var testCredential = wire.Credential{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

// serveV3Holder answers the connection's heartbeats, after first (the
// answer to its ACQUIRE), until it ends.
func serveV3Holder(t *testing.T, conn net.Conn, token uint64, first []byte) *v3Holder {
	t.Helper()
	h := &v3Holder{conn: conn, token: token, done: make(chan struct{})}
	if _, err := conn.Write(first); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(h.done)
		for {
			var hdr [wire.HeaderSize]byte // a HEARTBEAT is a header alone
			if _, err := io.ReadFull(conn, hdr[:]); err != nil {
				return
			}
			h.mu.Lock()
			conn.Write(wire.AppendAcquired(nil, false, token))
			h.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close() })
	return h
}

// end ends the connection: with an ERROR of code (0 for none: the end of
// the stream), or with a reset.
func (h *v3Holder) end(code wire.Code, reset bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if code != 0 {
		h.conn.Write(wire.AppendError(nil, code, "bye"))
	}
	if reset {
		h.conn.(*net.TCPConn).SetLinger(0)
	}
	h.conn.Close()
}

// TestRunThroughAMove: baton run keeps the command running while its lock
// moves to a new connection, after SHUTDOWN or the end of its server's
// process, and says so with -v; the command exits 0 and so does baton
// run. After a reset, which may have been a release, the lock is lost:
// the command is stopped and baton run exits 77, with no resume sent.
func TestRunThroughAMove(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		code  wire.Code
		reset bool
	}{
		{"SHUTDOWN", wire.CodeShutdown, false},
		{"the end of the stream", 0, false},
		{"a reset", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			conns := make(chan net.Conn, 4)
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					conns <- c
				}
			}()
			accept := func(within time.Duration) net.Conn {
				select {
				case c := <-conns:
					return c
				case <-time.After(within):
					return nil
				}
			}
			addr := ln.Addr().String()
			const token = 0x0300000042
			p := startBaton(t, "run", "-v", "-addr", addr, "-lease", "3s", "jobs", "--",
				"sh", "-c", "echo started > started; sleep 2; echo done > done")
			c1 := accept(10 * time.Second)
			if c1 == nil {
				t.Fatal("baton run did not connect")
			}
			h, payload := readFrame(t, c1)
			a, err := wire.DecodeAcquireUpTo(payload, wire.Version3)
			if err != nil || h.Type != wire.TypeAcquire || a.Version != wire.Version3 {
				t.Fatalf("first frame %v version %d (%v), want a version 3 ACQUIRE", h.Type, a.Version, err)
			}
			grant := wire.AppendAcquiredV3(nil, wire.Acquired{Token: token, WithCredential: true, Generation: 1, Credential: testCredential})
			old := serveV3Holder(t, c1, token, grant)
			readFileWhenThere(t, filepath.Join(p.dir, "started"))
			old.end(tc.code, tc.reset)

			c2 := accept(2 * time.Second)
			if tc.reset {
				if c2 != nil {
					t.Errorf("baton run connected again after a reset")
				}
				if code := p.wait(t); code != runner.ExitLockLost {
					t.Fatalf("exit %d after a reset, want %d; stderr:\n%s", code, runner.ExitLockLost, p.stderr)
				}
				if _, err := os.Stat(filepath.Join(p.dir, "done")); err == nil {
					t.Errorf("the command ran to its end after the lock was lost")
				}
				return
			}
			if c2 == nil {
				t.Fatalf("no resume; stderr:\n%s", p.stderr)
			}
			h, payload = readFrame(t, c2)
			r, err := wire.DecodeAcquireUpTo(payload, wire.Version3)
			if err != nil || h.Type != wire.TypeAcquire || !r.Held() || r.Resume.ID != token || r.Resume.Generation != 1 || !r.Resume.Credential.Equal(testCredential) {
				t.Fatalf("second connection's first frame %v %+v (%v), want the holder's resume", h.Type, r, err)
			}
			serveV3Holder(t, c2, token, grant)
			if code := p.wait(t); code != 0 {
				t.Fatalf("exit %d, want the command's 0; stderr:\n%s", code, p.stderr)
			}
			if got := readFileWhenThere(t, filepath.Join(p.dir, "done")); got != "done" {
				t.Errorf("the command wrote %q, want done", got)
			}
			want := fmt.Sprintf("lock jobs (token %d) moved from %s to %s in ", uint64(token), addr, addr)
			if !strings.Contains(p.stderr.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, p.stderr)
			}
			if bytes.Contains([]byte(p.stderr.String()), testCredential[:4]) {
				t.Errorf("stderr carries the credential")
			}
			t.Logf("stderr:\n%s", p.stderr)
		})
	}
}

// TestRunThroughAServerRestart is the end to end test of a standalone
// server's planned restart under baton run: SIGTERM, then the same server
// started again on its address and data directory, while the command runs;
// the command must run to its end and baton run exit 0. It runs only
// against a server that speaks protocol version 3.
func TestRunThroughAServerRestart(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	srv, addr := startServeBinary(t, dataDir)
	if !speaksVersion3(t, addr) {
		t.Skip("the server answers VERSION to protocol version 3: a claim cannot survive its restart yet")
	}
	p := startBaton(t, "run", "-v", "-addr", addr, "-lease", "10s", "jobs", "--",
		"sh", "-c", "echo started > started; sleep 4; echo done > done")
	readFileWhenThere(t, filepath.Join(p.dir, "started"))
	srv.Process.Signal(syscall.SIGTERM)
	srv.Wait()
	startServeBinary(t, dataDir, "-addr="+addr)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d, want the command's 0; stderr:\n%s", code, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), " moved from "+addr+" to "+addr) {
		t.Errorf("-v did not say that the lock moved:\n%s", p.stderr)
	}
}

// speaksVersion3 reports whether the server at addr takes a claim of
// protocol version 3 (it answers anything but VERSION).
func speaksVersion3(t *testing.T, addr string) bool {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b, err := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version3, Limit: 1, LeaseMs: 1000, Name: "probe/v3"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	h, p := readFrame(t, conn)
	return h.Type != wire.TypeError || len(p) == 0 || wire.Code(p[0]) != wire.CodeVersion
}
