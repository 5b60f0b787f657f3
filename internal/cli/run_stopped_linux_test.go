package cli

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/runner"
)

// TestRunStoppedWatchdogEnforcesDeadline: kill -STOP of baton run itself
// stops its heartbeats, so the server gives the lock to the next waiter
// after a lease; baton run cannot stop its command then, but its watchdog
// (another process) can, and does once the lock's deadline passes
// without a newer one: the command is gone before the next holder is
// granted. After SIGCONT baton run finds the loss and exits 77.
func TestRunStoppedWatchdogEnforcesDeadline(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	// The watchdog acts 0.8 x lease after the last confirmed send and the
	// server a lease after the last heartbeat it read: a 3 s lease leaves
	// the watchdog 600 ms, which a loaded 2-core machine's scheduling
	// delays (200 ms seen at 1 s) do not eat.
	const lease = 3 * time.Second
	p := startBaton(t, "run", "-lease", lease.String(), "-addr", srv.Addr, "jobs/stopped", "--",
		"sh", "-c", `echo $$ > c.pid; while :; do sleep 0.02; done`)
	pid := mustInt(t, readFileWhenThere(t, filepath.Join(p.dir, "c.pid")))

	c, err := baton.New([]string{srv.Addr}, baton.WithLease(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	granted := make(chan bool, 1) // whether the command still ran at the grant
	go func() {
		l, err := c.Acquire(ctx, "jobs/stopped")
		if err != nil {
			t.Error(err)
			granted <- false
			return
		}
		granted <- !processGone(pid)
		l.Release()
	}()
	time.Sleep(200 * time.Millisecond) // the waiter queues
	stoppedAt := time.Now()
	if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT)
	if ranOn := <-granted; ranOn {
		t.Errorf("the next holder was granted %v after kill -STOP of baton run while its command (pid %d) still ran", time.Since(stoppedAt).Round(time.Millisecond), pid)
	}
	batontest.Eventually(t, 5*time.Second, func() bool { return processGone(pid) }, "the command (pid %d) still runs after kill -STOP of baton run", pid)
	t.Logf("command gone %v after kill -STOP of baton run (lease %v)", time.Since(stoppedAt).Round(time.Millisecond), lease)
	syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT)
	if code := p.wait(t); code != runner.ExitLockLost {
		t.Errorf("baton run after SIGCONT: exit %d, want %d; stderr:\n%s", code, runner.ExitLockLost, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "the watchdog stops the command") {
		t.Errorf("stderr:\n%s\nwant the watchdog's line", p.stderr)
	}
}
