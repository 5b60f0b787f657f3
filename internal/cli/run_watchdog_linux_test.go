package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/internal/runner"
)

// escapingScript starts three loops that each append to a file of their
// own: one in the command's process group, one that left it with setsid,
// and one double-forked (its parent gone at once, so an orphan). Each
// writes its pid first.
const escapingScript = `
sh -c 'echo $$ > inpgrp.pid; while :; do echo x >> inpgrp.out; sleep 0.02; done' </dev/null >/dev/null 2>&1 &
setsid sh -c 'echo $$ > setsid.pid; while :; do echo x >> setsid.out; sleep 0.02; done' </dev/null >/dev/null 2>&1 &
( sh -c 'echo $$ > orphan.pid; while :; do echo x >> orphan.out; sleep 0.02; done' </dev/null >/dev/null 2>&1 & )
echo $$ > c.pid
wait`

var escapees = []string{"inpgrp", "setsid", "orphan"}

// TestRunKill9StopsWholeTree: baton run killed with SIGKILL takes the
// command's whole process tree with it, also what left the process group or
// double-forked, so nothing runs on beside the next holder. Before the
// watchdog only the direct child (the parent-death signal) died, and the
// loops ran on for ever.
func TestRunKill9StopsWholeTree(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	p := startBaton(t, "run", "-addr", srv.Addr, "jobs/k9", "--", "sh", "-c", escapingScript)
	pids := map[string]int{"command": mustInt(t, readFileWhenThere(t, filepath.Join(p.dir, "c.pid")))}
	for _, name := range escapees {
		pids[name] = mustInt(t, readFileWhenThere(t, filepath.Join(p.dir, name+".pid")))
	}
	t.Cleanup(func() { // whatever the outcome, leave nothing behind
		for _, pid := range pids {
			if !processGone(pid) {
				if proc, err := os.FindProcess(pid); err == nil {
					proc.Kill()
				}
			}
		}
	})

	p.cmd.Process.Kill()
	killedAt := time.Now()
	<-p.done
	const bound = 3 * time.Second
	for name, pid := range pids {
		batontest.Eventually(t, bound, func() bool { return processGone(pid) },
			"%s (pid %d) still runs %v after kill -9 of baton run", name, pid, bound)
	}
	t.Logf("whole tree gone %v after kill -9", time.Since(killedAt).Round(time.Millisecond))
	// Nothing writes any more.
	sizes := func() string {
		var b strings.Builder
		for _, name := range escapees {
			fi, _ := os.Stat(filepath.Join(p.dir, name+".out"))
			if fi != nil {
				fmt.Fprintf(&b, "%s=%d ", name, fi.Size())
			}
		}
		return b.String()
	}
	before := sizes()
	time.Sleep(100 * time.Millisecond)
	if after := sizes(); after != before {
		t.Errorf("output still grows after the tree was reported gone: %s then %s", before, after)
	}
	// And the lock is free for the next holder.
	q := startBaton(t, "run", "-nowait", "-addr", srv.Addr, "jobs/k9", "--", "true")
	if code := q.wait(t); code != 0 {
		t.Errorf("baton run -nowait after the kill: exit %d, want 0; stderr:\n%s", code, q.stderr)
	}
}

// TestRunLockLostStopsEscapedProcesses: when the lock is lost, what left
// the command's process group is stopped too, not only the group.
func TestRunLockLostStopsEscapedProcesses(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	p := startBaton(t, "run", "-addr", srv.Addr, "jobs/esc", "--", "sh", "-c", escapingScript)
	pids := map[string]int{}
	for _, name := range escapees {
		pids[name] = mustInt(t, readFileWhenThere(t, filepath.Join(p.dir, name+".pid")))
	}
	if _, err := srv.Srv.ForceRelease("jobs/esc"); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	if code := p.wait(t); code != runner.ExitLockLost {
		t.Errorf("exit code %d, want %d; stderr:\n%s", code, runner.ExitLockLost, p.stderr)
	}
	for name, pid := range pids {
		if !processGone(pid) {
			t.Errorf("%s (pid %d) still runs after baton run exited 77", name, pid)
			if proc, err := os.FindProcess(pid); err == nil {
				proc.Kill()
			}
		}
	}
}

// TestRunStopsBeforeTheLockMoves: a holder cut off from the server learns
// of the loss at 0.8 × lease, and the default kill grace (lease/10) has a
// command that ignores SIGTERM dead by 0.9 × lease (a 2 s lease: 200 ms to
// spare, for a loaded machine): its last write comes
// before the next holder's grant, which the server cannot make before
// 1 × lease of silence. With the old default grace of 10 s it wrote on
// beside the next holder for seconds.
func TestRunStopsBeforeTheLockMoves(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	srv := batontest.StartServer(t)
	proxy, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	p := startBaton(t, "run", "-lease", lease.String(), "-addr", proxy.Addr(), "jobs/cut", "--", "sh", "-c",
		`trap "" TERM; echo $$ > c.pid; while :; do date +%s%N >> out; sleep 0.005; done`)
	readFileWhenThere(t, filepath.Join(p.dir, "c.pid"))

	c, err := baton.New([]string{srv.Addr}, baton.WithLease(lease), baton.WithOwner("next"))
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		at  time.Time
		err error
	}
	next := make(chan grant, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		l, err := c.Acquire(ctx, "jobs/cut")
		at := time.Now()
		if err == nil {
			defer l.Release()
		}
		next <- grant{at, err}
	}()
	batontest.Eventually(t, 10*time.Second, func() bool {
		info, ok := srv.Srv.Lock("jobs/cut")
		return ok && len(info.Waiters) == 1
	}, "the second client never queued")

	proxy.Stall(faultproxy.Both) // the holder's link freezes: nothing in, nothing out
	g := <-next
	if g.err != nil {
		t.Fatalf("next holder: %v", g.err)
	}
	if code := p.wait(t); code != runner.ExitLockLost {
		t.Errorf("baton run exit %d, want %d; stderr:\n%s", code, runner.ExitLockLost, p.stderr)
	}
	out, err := os.ReadFile(filepath.Join(p.dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(out))
	lastNs, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
	if err != nil {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
	last := time.Unix(0, lastNs)
	t.Logf("the command's last write came %v before the next holder's grant", g.at.Sub(last).Round(time.Millisecond))
	if !last.Before(g.at) {
		t.Errorf("the command wrote %v after the next holder was granted the lock", last.Sub(g.at))
	}
}
