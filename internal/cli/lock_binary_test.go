package cli

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/runner"
)

// TestBinaryLockHolds: baton lock prints its token and holds the lock
// until SIGTERM (exit 0, released), with baton run's exit codes: 75 busy
// with -nowait, 77 when an operator takes the lock away.
func TestBinaryLockHolds(t *testing.T) {
	t.Parallel()
	serve := batonCmd(t, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-shutdown-linger=0s", "-log-format=json")
	sl := waitServing(t, startLogged(t, serve).next)

	l := startBaton(t, "lock", "-v", "-addr", sl.Addr, "-ops-addr", sl.OpsAddr, "jobs/maint")
	batontest.Eventually(t, 10*time.Second, func() bool { return strings.HasSuffix(l.stdout.String(), "\n") }, "baton lock's token")
	tok, err := strconv.ParseUint(strings.TrimSpace(l.stdout.String()), 10, 64)
	if err != nil || tok == 0 {
		t.Fatalf("baton lock printed %q, want its fencing token", l.stdout)
	}
	if code, out := batonOut(t, "run", "-nowait", "-addr", sl.Addr, "jobs/maint", "--", "true"); code != runner.ExitBusy {
		t.Errorf("baton run -nowait while baton lock holds: exit %d, want %d: %s", code, runner.ExitBusy, out)
	}
	if code, out := batonOut(t, "lock", "-nowait", "-addr", sl.Addr, "jobs/maint"); code != runner.ExitBusy {
		t.Errorf("baton lock -nowait while another holds: exit %d, want %d: %s", code, runner.ExitBusy, out)
	}
	l.cmd.Process.Signal(syscall.SIGTERM)
	if code := l.wait(t); code != 0 {
		t.Errorf("baton lock after SIGTERM: exit %d, want 0; stderr:\n%s", code, l.stderr)
	}
	if !strings.Contains(l.stderr.String(), "SIGTERM: released jobs/maint") {
		t.Errorf("baton lock -v after SIGTERM:\n%s\nwant it to say it released the lock", l.stderr)
	}
	if code, out := batonOut(t, "run", "-nowait", "-addr", sl.Addr, "jobs/maint", "--", "true"); code != 0 {
		t.Errorf("baton run -nowait after baton lock released: exit %d: %s", code, out)
	}

	lost := startBaton(t, "lock", "-addr", sl.Addr, "jobs/lost")
	batontest.Eventually(t, 10*time.Second, func() bool { return lost.stdout.String() != "" }, "the second lock's token")
	if code, out := batonOut(t, "release", "-ops-addr", sl.OpsAddr, "jobs/lost"); code != 0 {
		t.Fatalf("baton release: exit %d: %s", code, out)
	}
	if code := lost.wait(t); code != runner.ExitLockLost || !strings.Contains(lost.stderr.String(), "FORCE_RELEASED") {
		t.Errorf("baton lock after a force-release: exit %d, stderr %q; want %d and FORCE_RELEASED", code, lost.stderr, runner.ExitLockLost)
	}
}

// TestBinaryElect: two candidates and an observer. The first leads and
// holds until SIGTERM; the second runs its command as the leader once the
// first has gone; the observer prints each leader as it comes.
func TestBinaryElect(t *testing.T) {
	t.Parallel()
	serve := batonCmd(t, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-shutdown-linger=0s", "-log-format=json")
	sl := waitServing(t, startLogged(t, serve).next)

	obs := startBaton(t, "elect", "-observe", "-ops-addr", sl.OpsAddr, "web/primary")
	a := startBaton(t, "elect", "-owner", "node-a:8080", "-addr", sl.Addr, "web/primary")
	batontest.Eventually(t, 10*time.Second, func() bool { return a.stdout.String() != "" }, "node-a leading")
	b := startBaton(t, "elect", "-v", "-owner", "node-b:8080", "-addr", sl.Addr, "-ops-addr", sl.OpsAddr, "web/primary", "--",
		"sh", "-c", `echo "node-b leads with token $BATON_TOKEN"`)
	batontest.Eventually(t, 10*time.Second, func() bool { return strings.Contains(b.stderr.String(), "position 1") }, "node-b waiting")
	batontest.Eventually(t, 10*time.Second, func() bool { return strings.Contains(obs.stdout.String(), "node-a:8080 token ") }, "the observer seeing node-a")
	a.cmd.Process.Signal(syscall.SIGTERM)
	if code := a.wait(t); code != 0 {
		t.Errorf("node-a after SIGTERM: exit %d; stderr:\n%s", code, a.stderr)
	}
	if code := b.wait(t); code != 0 || !strings.Contains(b.stdout.String(), "node-b leads with token ") {
		t.Errorf("node-b: exit %d, stdout %q; want its command run as the leader", code, b.stdout)
	}
	batontest.Eventually(t, 10*time.Second, func() bool { return strings.Contains(obs.stdout.String(), "node-b:8080 token ") }, "the observer seeing node-b")
	obs.cmd.Process.Signal(syscall.SIGINT)
	if code := obs.wait(t); code != 0 {
		t.Errorf("baton elect -observe after SIGINT: exit %d; stderr:\n%s", code, obs.stderr)
	}
	lines := strings.Split(strings.TrimSpace(obs.stdout.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "node-a:8080 token ") || !strings.HasPrefix(lines[1], "node-b:8080 token ") {
		t.Errorf("baton elect -observe printed %q, want node-a's line then node-b's", lines)
	}
}
