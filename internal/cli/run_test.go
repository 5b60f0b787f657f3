//go:build unix

package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/runner"
	"github.com/batonlock/baton/internal/supervise"
	"github.com/batonlock/baton/ops"
)

// procTimeout bounds every run of the binary in these tests.
const procTimeout = 20 * time.Second

// batonProc is the binary running in the background.
type batonProc struct {
	cmd            *exec.Cmd
	dir            string // its working directory, where its command writes
	stdout, stderr *batontest.SyncBuffer
	done           chan struct{}
}

// startBaton starts the binary with args; t.Cleanup kills it if it still
// runs.
func startBaton(t *testing.T, args ...string) *batonProc {
	t.Helper()
	return startBatonEnv(t, nil, args...)
}

// startBatonEnv is startBaton with the variables env (NAME=value) added.
func startBatonEnv(t *testing.T, env []string, args ...string) *batonProc {
	t.Helper()
	p := &batonProc{cmd: batonCmd(t, args...), stdout: new(batontest.SyncBuffer), stderr: new(batontest.SyncBuffer), done: make(chan struct{})}
	p.cmd.Env = append(p.cmd.Env, env...)
	p.dir = p.cmd.Dir
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	// A process the test failed to have killed must not hold the output
	// pipes, and the test, open.
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits for the binary to exit and returns its exit code.
func (p *batonProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(procTimeout):
		t.Fatalf("baton %q still runs after %v; stderr:\n%s", p.cmd.Args[1:], procTimeout, p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// runBaton runs the binary to its end.
func runBaton(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := startBaton(t, args...)
	code = p.wait(t)
	return code, p.stdout.String(), p.stderr.String()
}

// readFileWhenThere waits for file to exist with content ending in a
// newline (so that it is completely written), and returns it trimmed.
func readFileWhenThere(t *testing.T, file string) string {
	t.Helper()
	var b []byte
	batontest.Eventually(t, 10*time.Second, func() bool {
		var err error
		b, err = os.ReadFile(file)
		return err == nil && bytes.HasSuffix(b, []byte("\n"))
	}, "%s was not written", file)
	return strings.TrimSpace(string(b))
}

// processGone reports whether pid has ended (a zombie counts as ended:
// PID 1 may never reap an orphan).
func processGone(pid int) bool {
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		i := bytes.LastIndexByte(b, ')')
		return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
	} else if _, statErr := os.Stat("/proc/self"); statErr == nil {
		return true // /proc works, and has no such process
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// holdLock takes name with the Go client, as owner, and returns the lock.
func holdLock(t *testing.T, addr, name, owner string) *baton.Lock {
	t.Helper()
	c, err := baton.New([]string{addr}, baton.WithOwner(owner), baton.WithLease(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("acquire %q: %v", name, err)
	}
	t.Cleanup(func() { l.Release() })
	return l
}

// waiters is the number of sessions waiting for name.
func waiters(srv *batontest.Server, name string) int {
	v, ok := srv.Srv.Lock(name)
	if !ok {
		return 0
	}
	return len(v.Waiters)
}

// isHeld reports whether name has a holder.
func isHeld(srv *batontest.Server, name string) bool {
	v, ok := srv.Srv.Lock(name)
	return ok && v.Holder != nil
}

// startOps serves the ops API of srv on a loopback port, with token ("" for
// none), and returns its address.
func startOps(t *testing.T, srv *batontest.Server, token string) string {
	t.Helper()
	hs := httptest.NewServer(ops.NewHandler(ops.Config{
		Backend:    srv.Srv,
		AdminToken: token,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}))
	t.Cleanup(hs.Close)
	return strings.TrimPrefix(hs.URL, "http://")
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestRunEnvironmentAndExitCode(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	code, stdout, stderr := runBaton(t, "run", "-addr", srv.Addr, "jobs/env", "--",
		"sh", "-c", `echo "lock=$BATON_LOCK token=$BATON_TOKEN"; exit 7`)
	if code != 7 {
		t.Errorf("exit code %d, want the command's 7; stderr:\n%s", code, stderr)
	}
	lock, token, ok := strings.Cut(strings.TrimSpace(stdout), " ")
	if !ok || lock != "lock=jobs/env" {
		t.Fatalf("stdout %q, want \"lock=jobs/env token=N\"", stdout)
	}
	if n, err := strconv.ParseUint(strings.TrimPrefix(token, "token="), 10, 64); err != nil || n == 0 {
		t.Errorf("BATON_TOKEN in %q is not a positive number", token)
	}
	if want := "baton run: sh exited with status 7\n"; stderr != want {
		t.Errorf("stderr %q, want %q (not a terminal, no -v: only the line of a non-zero exit)", stderr, want)
	}
	if isHeld(srv, "jobs/env") {
		t.Errorf("jobs/env still held after baton run exited")
	}

	// Tokens rise from one grant to the next; a signal's death is 128+N.
	code, stdout, _ = runBaton(t, "run", "-addr", srv.Addr, "jobs/env", "--",
		"sh", "-c", `echo "$BATON_TOKEN"; kill -KILL $$`)
	if code != 128+9 {
		t.Errorf("command killed by SIGKILL: exit code %d, want 137", code)
	}
	if n, _ := strconv.ParseUint(strings.TrimSpace(stdout), 10, 64); n <= mustUint(t, strings.TrimPrefix(token, "token=")) {
		t.Errorf("second token %q, want more than the first %q", stdout, token)
	}
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRunNoWaitBusy(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	holdLock(t, srv.Addr, "jobs/busy", "holder:1")
	const busyLine = "baton run: lock jobs/busy is busy; not waiting (-nowait)\n"
	for _, tt := range []struct {
		flag string
		want string // stderr
	}{
		// Not a terminal: the one line of a non-zero exit all the same.
		{"", busyLine},
		{"-v", busyLine},
		{"-q", ""},
	} {
		args := []string{"run", "-nowait", "-addr", srv.Addr}
		if tt.flag != "" {
			args = append(args, tt.flag)
		}
		args = append(args, "jobs/busy", "--", "sh", "-c", "echo ran")
		code, stdout, stderr := runBaton(t, args...)
		if code != runner.ExitBusy {
			t.Errorf("%q: exit code %d, want %d (busy)", tt.flag, code, runner.ExitBusy)
		}
		if stdout != "" {
			t.Errorf("%q: stdout %q: the command ran", tt.flag, stdout)
		}
		if tt.flag == "-v" {
			if !strings.HasSuffix(stderr, tt.want) {
				t.Errorf("-v: stderr %q, want it to end with %q", stderr, tt.want)
			}
		} else if stderr != tt.want {
			t.Errorf("%q: stderr %q, want %q", tt.flag, stderr, tt.want)
		}
	}
}

// TestRunEveryFailureSaysWhy: every exit other than 0 comes with one line
// on stderr, whatever stderr is (here a pipe), and -q silences them all.
func TestRunEveryFailureSaysWhy(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	holdLock(t, srv.Addr, "jobs/held", "holder:1")
	refused := closedAddr(t)
	for _, tt := range []struct {
		name string
		args []string
		code int
		line string // the one line of stderr, without -q
	}{
		{"busy", []string{"-nowait", "-addr", srv.Addr, "jobs/held", "--", "true"}, runner.ExitBusy,
			"baton run: lock jobs/held is busy; not waiting (-nowait)"},
		{"wait ran out", []string{"-wait", "200ms", "-addr", srv.Addr, "jobs/held", "--", "true"}, runner.ExitWaitTimeout,
			"baton run: gave up waiting for lock jobs/held after 200ms (-wait)"},
		{"unreachable", []string{"-addr", refused, "jobs/x", "--", "true"}, runner.ExitUnreachable,
			"baton run: cannot reach a server at " + refused + ": connection refused"},
		{"command failed", []string{"-addr", srv.Addr, "jobs/fail", "--", "sh", "-c", "exit 3"}, 3,
			"baton run: sh exited with status 3"},
		{"command exits 75 itself", []string{"-addr", srv.Addr, "jobs/fail", "--", "sh", "-c", "exit 75"}, 75,
			"baton run: sh exited with status 75"},
		{"command killed", []string{"-addr", srv.Addr, "jobs/fail", "--", "sh", "-c", "kill -KILL $$"}, 128 + 9,
			"baton run: sh exited with status 137"},
		{"command not found", []string{"-addr", srv.Addr, "jobs/fail", "--", "no-such-command-baton-test"}, runner.ExitCmdNotFound,
			"baton run: no-such-command-baton-test: command not found"},
	} {
		for _, quiet := range []bool{false, true} {
			args := []string{"run"}
			if quiet {
				args = append(args, "-q")
			}
			code, _, stderr := runBaton(t, append(args, tt.args...)...)
			want := tt.line + "\n"
			if quiet {
				want = ""
			}
			if code != tt.code || stderr != want {
				t.Errorf("%s (-q %v): exit code %d, stderr %q; want %d, %q", tt.name, quiet, code, stderr, tt.code, want)
			}
		}
	}
}

func TestRunWaitTimesOut(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	holdLock(t, srv.Addr, "jobs/slow", "holder:1")
	start := time.Now()
	code, stdout, stderr := runBaton(t, "run", "-wait", "300ms", "-addr", srv.Addr, "jobs/slow", "--", "sh", "-c", "echo ran")
	if elapsed := time.Since(start); elapsed < 300*time.Millisecond {
		t.Errorf("gave up after %v, before -wait 300ms", elapsed)
	}
	if code != runner.ExitWaitTimeout {
		t.Errorf("exit code %d, want %d (wait timed out)", code, runner.ExitWaitTimeout)
	}
	if stdout != "" {
		t.Errorf("stdout %q: the command ran", stdout)
	}
	if want := "baton run: gave up waiting for lock jobs/slow after 300ms (-wait)\n"; stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	if n := waiters(srv, "jobs/slow"); n != 0 {
		t.Errorf("%d waiters left in the queue, want 0", n)
	}
}

func TestRunWaitsInQueue(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	opsAddr := startOps(t, srv, "queue-token")
	held := holdLock(t, srv.Addr, "jobs/queue", "holder:1")
	p := startBatonEnv(t, []string{"BATON_ADMIN_TOKEN=queue-token"}, "run", "-v", "-wait", "15s", "-addr", srv.Addr, "-ops-addr", opsAddr, "jobs/queue", "--", "sh", "-c", "echo ran")
	batontest.Eventually(t, 10*time.Second, func() bool { return waiters(srv, "jobs/queue") == 1 }, "baton run is not in the queue")
	batontest.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(p.stderr.String(), "held by holder:1")
	}, "no -v line with the holder; stderr:\n%s", p.stderr)
	held.Release()
	if code := p.wait(t); code != 0 {
		t.Errorf("exit code %d, want 0; stderr:\n%s", code, p.stderr)
	}
	if got := p.stdout.String(); got != "ran\n" {
		t.Errorf("stdout %q, want \"ran\\n\"", got)
	}
	stderr := p.stderr.String()
	for _, want := range []string{
		"baton run: waiting for jobs/queue: position 1, held by holder:1\n",
		"baton run: acquired jobs/queue after ",
		"baton run: sh exited with status 0\n",
		"baton run: released jobs/queue\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("-v stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "\r") {
		t.Errorf("stderr is not a terminal but got a carriage return:\n%q", stderr)
	}
}

func TestRunServerUnreachable(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	code, stdout, stderr := runBaton(t, "run", "-addr", addr, "jobs/x", "--", "sh", "-c", "echo ran")
	if code != runner.ExitUnreachable {
		t.Errorf("exit code %d, want %d (unreachable)", code, runner.ExitUnreachable)
	}
	if stdout != "" {
		t.Errorf("stdout %q: the command ran", stdout)
	}
	if want := "baton run: cannot reach a server at " + addr + ": connection refused\n"; stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
}

func TestRunCommandNotFound(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	code, _, stderr := runBaton(t, "run", "-addr", srv.Addr, "jobs/x", "--", "no-such-command-baton-test")
	if code != runner.ExitCmdNotFound {
		t.Errorf("exit code %d, want %d", code, runner.ExitCmdNotFound)
	}
	if want := "baton run: no-such-command-baton-test: command not found\n"; stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
}

func TestRunUsageErrorsBinary(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string // in the one line
	}{
		{[]string{"run"}, "no lock name given"},
		{[]string{"run", "jobs/x"}, `no command given after "--"`},
		{[]string{"run", "jobs/x", "true"}, `missing "--"`},
		{[]string{"run", "-lease", "0s", "jobs/x", "--", "true"}, "lease 0s is below baton run's minimum of 250ms"},
		{[]string{"run", "-lease", "1ms", "jobs/x", "--", "true"}, "lease 1ms is below baton run's minimum of 250ms"},
		{[]string{"run", "-lease", "10", "jobs/x", "--", "true"}, "add a unit: 10s"},
		{[]string{"kick", "abc"}, "session ids are numbers"},
	} {
		code, stdout, stderr := runBaton(t, tt.args...)
		if code != exitUsage || stdout != "" || len(lines(stderr)) != 1 || !strings.Contains(stderr, tt.want) {
			t.Errorf("baton %q: exit code %d, stdout %q, stderr %q; want 2, nothing, one line with %q", tt.args, code, stdout, stderr, tt.want)
		}
	}
}

// TestRunForceReleaseStopsGroup force-releases the lock under a command that
// started a grandchild: both must be gone within the kill grace (plus slack),
// and baton run must exit "lock lost".
func TestRunForceReleaseStopsGroup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		grace   time.Duration
		script  string
		minTime time.Duration // the stop must not come sooner
	}{
		// Both die of the SIGTERM, long before the grace.
		{"SIGTERM", 10 * time.Second,
			`sleep 100 </dev/null >/dev/null 2>&1 & echo $! > gc.pid; echo $$ > c.pid; wait`, 0},
		// Both ignore SIGTERM (the trap is inherited): SIGKILL after the grace.
		{"SIGKILL after grace", time.Second,
			`trap "" TERM; sleep 100 </dev/null >/dev/null 2>&1 & echo $! > gc.pid; echo $$ > c.pid; wait`, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := batontest.StartServer(t)
			p := startBaton(t, "run", "-kill-grace", tt.grace.String(), "-addr", srv.Addr, "jobs/fr", "--", "sh", "-c", tt.script)
			child := mustInt(t, readFileWhenThere(t, filepath.Join(p.dir, "c.pid")))
			grandchild := mustInt(t, readFileWhenThere(t, filepath.Join(p.dir, "gc.pid")))

			start := time.Now()
			if _, err := srv.Srv.ForceRelease("jobs/fr"); err != nil {
				t.Fatalf("ForceRelease: %v", err)
			}
			bound := min(tt.grace, 3*time.Second) + 2*time.Second
			select {
			case <-p.done:
			case <-time.After(bound):
				t.Fatalf("baton run still runs %v after the force-release (kill grace %v); stderr:\n%s", bound, tt.grace, p.stderr)
			}
			elapsed := time.Since(start)
			if elapsed < tt.minTime {
				t.Errorf("stopped after %v, before the kill grace %v", elapsed, tt.minTime)
			}
			if code := p.cmd.ProcessState.ExitCode(); code != runner.ExitLockLost {
				t.Errorf("exit code %d, want %d (lock lost); stderr:\n%s", code, runner.ExitLockLost, p.stderr)
			}
			for _, pid := range []int{child, grandchild} {
				if !processGone(pid) {
					t.Errorf("process %d of the command's group still runs after baton run exited", pid)
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			if s := p.stderr.String(); !strings.Contains(s, `baton run: lock "jobs/fr" lost: `) || !strings.Contains(s, "FORCE_RELEASED") {
				t.Errorf("stderr lacks the loss and its cause:\n%s", s)
			}
			if tt.minTime > 0 && !strings.Contains(p.stderr.String(), "sending SIGKILL") {
				t.Errorf("stderr does not tell of the SIGKILL:\n%s", p.stderr)
			}
		})
	}
}

func mustInt(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

func TestRunServerShutdownWhileHolding(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	p := startBaton(t, "run", "-addr", srv.Addr, "jobs/shut", "--", "sh", "-c", `echo $$ > c.pid; while :; do sleep 0.05; done`)
	child := mustInt(t, readFileWhenThere(t, filepath.Join(p.dir, "c.pid")))
	srv.Stop(t)
	if code := p.wait(t); code != runner.ExitLockLost {
		t.Errorf("exit code %d, want %d (lock lost); stderr:\n%s", code, runner.ExitLockLost, p.stderr)
	}
	if !processGone(child) {
		t.Errorf("the command (pid %d) still runs", child)
		syscall.Kill(child, syscall.SIGKILL)
	}
	if s := p.stderr.String(); !strings.Contains(s, "SHUTDOWN") {
		t.Errorf("stderr does not name the shutdown:\n%s", s)
	}
}

// TestRunSignalForwarded sends SIGTERM, SIGINT, SIGHUP or SIGQUIT to baton run: the command
// gets it, and the lock stays held until the command has exited.
func TestRunSignalForwarded(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT} {
		t.Run(supervise.SignalName(sig), func(t *testing.T) {
			t.Parallel()
			srv := batontest.StartServer(t)
			name := "jobs/" + supervise.SignalName(sig)
			trap := strings.TrimPrefix(supervise.SignalName(sig), "SIG")
			// The command waits for the file "go" after the signal, so the
			// test can look at the lock while the command still runs.
			script := `trap 'echo ` + trap + ` > got; while [ ! -f go ]; do sleep 0.02; done; exit 3' ` + trap + `
echo ready > ready
while :; do sleep 0.02; done`
			p := startBaton(t, "run", "-addr", srv.Addr, name, "--", "sh", "-c", script)
			readFileWhenThere(t, filepath.Join(p.dir, "ready"))
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if got := readFileWhenThere(t, filepath.Join(p.dir, "got")); got != trap {
				t.Errorf("the command trapped %q, want %q", got, trap)
			}
			if !isHeld(srv, name) {
				t.Errorf("%s released while the command still runs", name)
			}
			select {
			case <-p.done:
				t.Fatalf("baton run exited before the command; stderr:\n%s", p.stderr)
			default:
			}
			if err := os.WriteFile(filepath.Join(p.dir, "go"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t); code != 3 {
				t.Errorf("exit code %d, want the command's 3; stderr:\n%s", code, p.stderr)
			}
			// Released: a try-lock gets it at once.
			if code, _, stderr := runBaton(t, "run", "-nowait", "-addr", srv.Addr, name, "--", "true"); code != 0 {
				t.Errorf("baton run -nowait after the first exited: exit code %d, want 0; stderr:\n%s", code, stderr)
			}
		})
	}
}

// TestRunSignalWhileWaiting: a signal before the lock is granted ends the
// wait with 128+N and a line that says so, and the command never runs.
func TestRunSignalWhileWaiting(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	holdLock(t, srv.Addr, "jobs/w", "holder:1")
	p := startBaton(t, "run", "-addr", srv.Addr, "jobs/w", "--", "sh", "-c", "echo ran")
	batontest.Eventually(t, 10*time.Second, func() bool { return waiters(srv, "jobs/w") == 1 }, "baton run is not in the queue")
	p.cmd.Process.Signal(syscall.SIGINT)
	if code := p.wait(t); code != 128+int(syscall.SIGINT) {
		t.Errorf("exit code %d, want 130", code)
	}
	if s := p.stdout.String(); s != "" {
		t.Errorf("stdout %q: the command ran", s)
	}
	// An exit other than 0, so said like the others.
	if want := "baton run: SIGINT while waiting for jobs/w; not running the command\n"; p.stderr.String() != want {
		t.Errorf("stderr %q, want %q", p.stderr, want)
	}
	batontest.Eventually(t, 5*time.Second, func() bool { return waiters(srv, "jobs/w") == 0 }, "the waiter stayed in the queue")
}

// TestRunStopsLeftovers: what the command leaves running in its group when
// it exits is stopped before the lock is released.
func TestRunStopsLeftovers(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	p := startBaton(t, "run", "-addr", srv.Addr, "jobs/left", "--",
		"sh", "-c", `sleep 100 </dev/null >/dev/null 2>&1 & echo $! > left.pid; exit 4`)
	if code := p.wait(t); code != 4 {
		t.Errorf("exit code %d, want the command's 4; stderr:\n%s", code, p.stderr)
	}
	if pid := mustInt(t, readFileWhenThere(t, filepath.Join(p.dir, "left.pid"))); !processGone(pid) {
		t.Errorf("the command's background process %d outlived baton run", pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// TestRunRefusesSuspend: SIGTSTP does not stop baton run, which would stop
// its heartbeats while the command runs on.
func TestRunRefusesSuspend(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	p := startBaton(t, "run", "-addr", srv.Addr, "jobs/tstp", "--", "sh", "-c",
		`echo ready > ready; while [ ! -f go ]; do sleep 0.02; done`)
	readFileWhenThere(t, filepath.Join(p.dir, "ready"))
	p.cmd.Process.Signal(syscall.SIGTSTP)
	batontest.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(p.stderr.String(), "baton run: ignoring SIGTSTP")
	}, "no word of the refused SIGTSTP; stderr:\n%s\nstate %s", p.stderr, procState(p.cmd.Process.Pid))
	if err := os.WriteFile(filepath.Join(p.dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A stopped baton run would not exit.
	if code := p.wait(t); code != 0 {
		t.Errorf("exit code %d, want 0; stderr:\n%s", code, p.stderr)
	}
}

func procState(pid int) string {
	var out strings.Builder
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/status")
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "State") || strings.HasPrefix(l, "SigBlk") || strings.HasPrefix(l, "SigPnd") || strings.HasPrefix(l, "Pid") {
				out.WriteString(l + " ")
			}
		}
		out.WriteString("\n")
	}
	return out.String()
}
