package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
)

// Protocol version 3 against the real binary: a standalone `baton serve`
// stopped with SIGTERM, or killed with kill -9, and started again on the
// same data directory, with raw clients that keep their claims.

// standalone is a `baton serve` on dataDir, at addr ("127.0.0.1:0" for a
// new port), with JSON logs.
func standalone(t *testing.T, dataDir, addr string, extra ...string) (*loggedCmd, servingLine, func() *os.Process) {
	t.Helper()
	args := append([]string{"serve", "-addr=" + addr, "-ops-addr=127.0.0.1:0", "-shutdown-linger=0", "-data-dir=" + dataDir}, extra...)
	cmd := batonCmd(t, args...)
	cmd.Env = append(cmd.Env, "BATON_LOG_FORMAT=json")
	l := startLogged(t, cmd)
	return l, waitServing(t, l.next), func() *os.Process { return cmd.Process }
}

// v3Claim connects to addr and makes a claim of version 3 on name: it must
// be answered with a credential, a grant if held, else WAITING at pos.
func v3Claim(t *testing.T, addr, name string, lease time.Duration, held bool, pos uint32) (*batontest.Conn, *batontest.Claim) {
	t.Helper()
	c := batontest.Dial(t, addr)
	c.AcquireV3(name, lease, false, 1, false, "raw:"+name)
	f := c.ReadFrame(5 * time.Second)
	cl := &batontest.Claim{Name: name, Lease: lease, Limit: 1}
	if !cl.Update(f) || cl.Held != held || (!held && f.Position != pos) {
		t.Fatalf("%s: got %v, want a grant (%v) or WAITING %d, with a credential", name, f, held, pos)
	}
	return c, cl
}

// resumeAt sends cl's resume to addr and reads its answer.
func resumeAt(t *testing.T, addr string, cl *batontest.Claim) (*batontest.Conn, batontest.Frame) {
	t.Helper()
	c := batontest.Dial(t, addr)
	c.Write(cl.ResumeFrame(t, "raw:"+cl.Name))
	return c, c.ReadFrame(5 * time.Second)
}

// expectErrorFrame checks that f is ERROR code.
func expectErrorFrame(t *testing.T, f batontest.Frame, code wire.Code) {
	t.Helper()
	if f.Type != wire.TypeError || f.Err.Code != code {
		t.Fatalf("got %v, want ERROR %v", f, code)
	}
}

// TestBinaryStandaloneSIGTERMKeepsClaims: SIGTERM of `baton serve` lists
// the claims of version 3 in its data directory; the next start on it
// keeps them: the holder resumes with its token, its waiter keeps its
// place, the name grants nothing until its holder is back; a name whose
// listed holder never comes back is granted once that holder's time is
// up, and no sooner.
func TestBinaryStandaloneSIGTERMKeepsClaims(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data")
	const lease, gone = 10 * time.Second, 3 * time.Second
	l, sl, proc := standalone(t, dataDir, "127.0.0.1:0")
	h, hc := v3Claim(t, sl.Addr, "x", lease, true, 0)
	w, wc := v3Claim(t, sl.Addr, "x", lease, false, 1)
	g, _ := v3Claim(t, sl.Addr, "y", gone, true, 0)
	listed := time.Now()

	if err := proc().Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*batontest.Conn{h, w, g} {
		if f := c.ReadFrame(5 * time.Second); f.Type != wire.TypeError || f.Err.Code != wire.CodeShutdown {
			t.Fatalf("got %v, want ERROR SHUTDOWN", f)
		}
		c.Conn.Close()
	}
	logged := l.drain(t)
	if err := <-l.waited; err != nil {
		t.Fatalf("baton serve after SIGTERM: %v; log:\n%s", err, logged)
	}
	l.waited <- nil
	if !strings.Contains(logged, `"msg":"claims handed to the next start","claims":3,"holders":2`) {
		t.Fatalf("log lacks the list of 3 claims, 2 holders:\n%s", logged)
	}
	if fi, err := os.Stat(filepath.Join(dataDir, "resume-list")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("resume-list: %v, %v; want it, mode 0600", fi, err)
	}

	_, sl2, _ := standalone(t, dataDir, sl.Addr)
	started := time.Now()
	addr := sl2.Addr
	// y's listed holder does not come back: a new claim waits for its
	// time left.
	wy := batontest.Dial(t, addr)
	wy.Acquire("y", lease, false, "")
	if f := wy.ReadFrame(5 * time.Second); f.Type != wire.TypeWaiting || f.Position != 1 {
		t.Fatalf("y: got %v, want WAITING 1 behind the listed holder", f)
	}
	busy := batontest.Dial(t, addr)
	busy.Acquire("x", lease, true, "")
	expectErrorFrame(t, busy.ReadFrame(5*time.Second), wire.CodeBusy)

	h2, f := resumeAt(t, addr, hc)
	if f.Type != wire.TypeAcquired || !f.WithCredential || f.Token != hc.ID {
		t.Fatalf("the holder's resume: got %v, want ACQUIRED with its token %d", f, hc.ID)
	}
	w2, f := resumeAt(t, addr, wc)
	if f.Type != wire.TypeWaiting || !f.WithTicket || f.Ticket != wc.ID || f.Position != 1 {
		t.Fatalf("the waiter's resume: got %v, want WAITING 1 with its ticket %d", f, wc.ID)
	}
	h2.Heartbeat()
	if f := h2.ReadFrame(5 * time.Second); f.Type != wire.TypeAcquired || f.Token != hc.ID {
		t.Fatalf("heartbeat after the resume: got %v, want ACQUIRED %d", f, hc.ID)
	}
	h2.Conn.Close()
	if f := w2.ReadFrame(5 * time.Second); f.Type != wire.TypeAcquired || !f.Push || f.Token <= hc.ID {
		t.Fatalf("the waiter after the holder's release: got %v, want the push with a token above %d", f, hc.ID)
	}

	f = wy.ReadFrame(gone + 5*time.Second)
	if f.Type != wire.TypeAcquired || !f.Push {
		t.Fatalf("y: got %v, want the push once the listed holder's time is up", f)
	}
	if waited, left := time.Since(started), gone-started.Sub(listed); waited < left-100*time.Millisecond {
		t.Fatalf("y was granted %v after the start, before its listed holder's time left (at least %v)", waited, left)
	}
}

// TestBinaryStandaloneKill9ResumeInGrace: after kill -9 of `baton serve`,
// the next start's crash grace takes back a holder that resumes in it,
// with its token; a claim that comes back after the grace is refused.
func TestBinaryStandaloneKill9ResumeInGrace(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data")
	const lease = 4 * time.Second
	l, sl, proc := standalone(t, dataDir, "127.0.0.1:0")
	h, hc := v3Claim(t, sl.Addr, "x", lease, true, 0)
	late, lc := v3Claim(t, sl.Addr, "z", lease, true, 0)
	if err := proc().Kill(); err != nil {
		t.Fatal(err)
	}
	<-l.waited
	l.waited <- nil
	for _, c := range []*batontest.Conn{h, late} {
		if f, err := c.TryReadFrame(5 * time.Second); err == nil {
			t.Fatalf("got %v after kill -9, want the connection's end", f)
		}
		c.Conn.Close()
	}

	_, sl2, _ := standalone(t, dataDir, sl.Addr)
	started := time.Now()
	h2, f := resumeAt(t, sl2.Addr, hc)
	if f.Type != wire.TypeAcquired || !f.WithCredential || f.Token != hc.ID {
		t.Fatalf("the holder's resume in the crash grace: got %v, want ACQUIRED with its token %d", f, hc.ID)
	}
	// Kept alive, past the grace (the lease bound, 4 s).
	for time.Since(started) < lease+500*time.Millisecond {
		h2.Heartbeat()
		if f := h2.ReadFrame(5 * time.Second); f.Type != wire.TypeAcquired || f.Token != hc.ID {
			t.Fatalf("heartbeat: got %v, want ACQUIRED %d", f, hc.ID)
		}
		time.Sleep(300 * time.Millisecond)
	}
	_, f = resumeAt(t, sl2.Addr, lc)
	expectErrorFrame(t, f, wire.CodeResumeRefused)
}
