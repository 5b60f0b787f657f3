//go:build unix

package cli

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/runner"
)

// silentServer accepts connections and never answers: a hung or stopped
// server, whose kernel still completes the handshake.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				io.Copy(io.Discard, c) // reads everything, says nothing
			})
		}
	})
	return ln.Addr().String()
}

// lineAt is when a line containing want first appeared in a buffer that
// start began to fill, polled every 10ms; zero if it did not within limit.
func lineAt(buf *batontest.SyncBuffer, want string, start time.Time, limit time.Duration) time.Duration {
	for time.Since(start) < limit {
		if strings.Contains(buf.String(), want) {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0
}

// TestRunSilentServer: baton run against a server that accepts and never
// answers says so within the answer bound (5s with the default 10s lease),
// keeps trying, and exits 78 when -connect-timeout runs out. Times are
// lower bounds, with the upper ones wide for a loaded machine.
func TestRunSilentServer(t *testing.T) {
	t.Parallel()
	addr := silentServer(t)
	const connectTimeout = 7 * time.Second
	buildBaton(t) // not timed
	start := time.Now()
	p := startBaton(t, "run", "-addr", addr, "-connect-timeout", connectTimeout.String(), "jobs/x", "--", "sh", "-c", "echo ran")
	said := lineAt(p.stderr, "baton run: no answer from "+addr+" in 5", start, 10*time.Second)
	switch {
	case said == 0:
		t.Fatalf("no word of the silent server within 10s; stderr %q", p.stderr)
	case said < 5*time.Second || said > 8*time.Second:
		t.Errorf("the silent server was told after %v, want at the 5s answer bound", said)
	}
	code := p.wait(t)
	took := time.Since(start)
	if code != runner.ExitUnreachable {
		t.Errorf("exit code %d, want %d", code, runner.ExitUnreachable)
	}
	if took < connectTimeout || took > connectTimeout+4*time.Second {
		t.Errorf("exited after %v, want at -connect-timeout %v", took, connectTimeout)
	}
	l := lines(p.stderr.String())
	if len(l) < 2 || !strings.HasPrefix(l[0], "baton run: no answer from "+addr+" in 5") || !strings.Contains(l[0], "; retrying in ") {
		t.Errorf("stderr %q, want a line per unanswered attempt, then the last", p.stderr)
	}
	if want := "baton run: no server at " + addr + " answered within 7s (-connect-timeout); last: no answer from " + addr + " in 5"; len(l) == 0 || !strings.HasPrefix(l[len(l)-1], want) {
		t.Errorf("last line of %q, want it to start %q", p.stderr, want)
	}
	if p.stdout.String() != "" {
		t.Errorf("stdout %q: the command ran", p.stdout)
	}
}

// TestRunSilentServerWaitAndQuiet: -wait still bounds the wait (exit 76
// before -connect-timeout), and -q silences the no-answer lines.
func TestRunSilentServerWaitAndQuiet(t *testing.T) {
	t.Parallel()
	addr := silentServer(t)
	buildBaton(t) // not timed
	start := time.Now()
	code, stdout, stderr := runBaton(t, "run", "-q", "-addr", addr, "-lease", "1s", "-wait", "3s", "jobs/x", "--", "sh", "-c", "echo ran")
	if took := time.Since(start); code != runner.ExitWaitTimeout || stderr != "" || stdout != "" || took < 3*time.Second {
		t.Errorf("-q -wait 3s: exit code %d after %v, stdout %q, stderr %q; want 76 after 3s, nothing said", code, took, stdout, stderr)
	}
	// The same without -q: the lease bounds each attempt (0.8 × 1s), and
	// the line says so.
	code, _, stderr = runBaton(t, "run", "-addr", addr, "-lease", "1s", "-wait", "3s", "jobs/x", "--", "sh", "-c", "echo ran")
	if code != runner.ExitWaitTimeout || !strings.Contains(stderr, "baton run: no answer from "+addr+": no confirmation from the server for 800ms (0.8 × lease 1s); retrying in ") ||
		!strings.HasSuffix(stderr, "baton run: gave up waiting for lock jobs/x after 3s (-wait)\n") {
		t.Errorf("-wait 3s: exit code %d, stderr %q; want 76, the no-answer lines, then the -wait line", code, stderr)
	}
}

// TestRunServerGoneWhileWaiting: a server that answered and then went away
// for good: baton run says that no server answers, and exits 78 once
// -connect-timeout has passed since it gave its place up (a waiter of
// protocol version 3 first tries, for up to a lease, 10 s here, to keep
// its place on the next server).
func TestRunServerGoneWhileWaiting(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	holdLock(t, srv.Addr, "jobs/gone", "holder:1")
	p := startBaton(t, "run", "-addr", srv.Addr, "-connect-timeout", "3s", "jobs/gone", "--", "sh", "-c", "echo ran")
	batontest.Eventually(t, 10*time.Second, func() bool { return waiters(srv, "jobs/gone") == 1 }, "baton run is not in the queue")
	time.Sleep(4 * time.Second) // longer than -connect-timeout: answered all along, it waits on
	if strings.Contains(p.stderr.String(), "baton run:") {
		t.Fatalf("baton run spoke while its server answered: %q", p.stderr)
	}
	gone := time.Now()
	srv.Stop(t)
	code := p.wait(t)
	took := time.Since(gone)
	if code != runner.ExitUnreachable || took < 3*time.Second || took > 18*time.Second {
		t.Errorf("exit code %d, %v after the server went; want 78 after the lease's try to keep the place and -connect-timeout 3s", code, took)
	}
	stderr := p.stderr.String()
	if !strings.Contains(stderr, "baton run: no server answered: ") || !strings.Contains(stderr, "connection refused; retrying in ") ||
		!strings.Contains(stderr, "baton run: no server at "+srv.Addr+" answered within 3s (-connect-timeout); last: no server answered: ") {
		t.Errorf("stderr %q, want the refused dials told, then the -connect-timeout line", stderr)
	}
}
