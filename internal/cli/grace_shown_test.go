package cli

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// TestBinaryCrashGraceShown: after kill -9 of a server whose session held a
// lock, the restarted server grants nothing for the old lease, and says so
// where a person looks: baton locks prints "grace: grants resume in ...",
// and a waiting baton run -v prints it in its waiting line (from the ops
// API at its default address's place, given here as -ops-addr).
func TestBinaryCrashGraceShown(t *testing.T) {
	t.Parallel()
	const lease = 6 * time.Second
	dataDir := t.TempDir()
	cmd, addr := startServeBinary(t, dataDir)
	if _, typ := acquireConn(t, addr, "jobs", lease); typ != wire.TypeAcquired {
		t.Fatalf("first run: got %v, want ACQUIRED", typ)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	serve := batonCmd(t, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-shutdown-linger=0s",
		"-data-dir="+dataDir, "-log-format=json")
	sl := waitServing(t, startLogged(t, serve).next)
	restarted := time.Now()

	run := startBaton(t, "run", "-v", "-addr", sl.Addr, "-ops-addr", sl.OpsAddr, "jobs", "--", "true")
	var locks string
	for time.Since(restarted) < lease/2 {
		_, locks = batonOut(t, "locks", "-ops-addr", sl.OpsAddr)
		if strings.Contains(locks, "1\n") { // the run waits
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(locks, "grace: grants resume in ") {
		t.Errorf("baton locks during the crash grace:\n%s\nwant a line \"grace: grants resume in ...\"", locks)
	}
	if code := run.wait(t); code != 0 {
		t.Fatalf("baton run: exit %d, want 0; stderr:\n%s", code, run.stderr)
	}
	stderr := run.stderr.String()
	if !strings.Contains(stderr, "baton run: waiting for jobs: position 1, grace: grants resume in ") {
		t.Errorf("baton run -v during the crash grace:\n%s\nwant a waiting line with \"grace: grants resume in ...\"", stderr)
	}
	if waited := time.Since(restarted); waited < lease {
		t.Errorf("granted %v after the restart, within the crash grace of %v", waited, lease)
	}
}
