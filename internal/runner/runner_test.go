//go:build unix

package runner

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/supervise"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// A run with a command starts this binary as the command's watchdog.
	if len(os.Args) > 1 && os.Args[1] == supervise.WatchdogArg {
		os.Exit(supervise.RunWatchdog(os.Args[2:]))
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// held reports whether name has a holder on srv.
func held(srv *batontest.Server, name string) bool {
	v, ok := srv.Srv.Lock(name)
	return ok && v.Holder != nil
}

// config is a claim of name at addr with command, writing to out and errOut.
func config(addr, name string, out, errOut *batontest.SyncBuffer, command ...string) Config {
	return Config{
		Prog: "baton run", Name: name, Command: command, Addrs: []string{addr}, Owner: "runner-test",
		Lease: 2 * time.Second, ConnectTimeout: 10 * time.Second, KillGrace: 200 * time.Millisecond, Resume: true,
		Stdout: out, Stderr: errOut,
		UsageError: func(msg string) int {
			fmt.Fprintf(errOut, "baton run: %s; run 'baton help run'\n", msg)
			return exitUsage
		},
	}
}

// TestRunCommandUnderLock: the command runs with the lock's name and
// token in its environment, its status is the run's, and a status other
// than 0 comes with baton run's one line; the lock is free afterwards.
func TestRunCommandUnderLock(t *testing.T) {
	srv := batontest.StartServer(t)
	var out, errOut batontest.SyncBuffer
	cfg := config(srv.Addr, "jobs/x", &out, &errOut, "sh", "-c", `echo "$BATON_LOCK $BATON_TOKEN"; exit 3`)
	if code := Run(context.Background(), cfg); code != 3 {
		t.Fatalf("exit %d, want the command's 3; stderr %q", code, errOut.String())
	}
	if got := out.String(); !strings.HasPrefix(got, "jobs/x ") || len(strings.Fields(got)) != 2 {
		t.Errorf("the command printed %q, want the lock's name and its token", got)
	}
	if want := "baton run: sh exited with status 3\n"; errOut.String() != want {
		t.Errorf("stderr %q, want %q", errOut.String(), want)
	}
	batontest.Eventually(t, 10*time.Second, func() bool { return !held(srv, "jobs/x") }, "jobs/x is still held after the run")
}

// TestRunBusyAndQuiet: -nowait against a held lock exits ExitBusy with
// one line, and -q keeps even that line back.
func TestRunBusyAndQuiet(t *testing.T) {
	srv := batontest.StartServer(t)
	c, err := baton.New([]string{srv.Addr}, baton.WithLease(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "jobs/held")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	for _, quiet := range []bool{false, true} {
		var out, errOut batontest.SyncBuffer
		cfg := config(srv.Addr, "jobs/held", &out, &errOut, "true")
		cfg.NoWait, cfg.Quiet = true, quiet
		want := "baton run: lock jobs/held is busy; not waiting (-nowait)\n"
		if quiet {
			want = ""
		}
		if code := Run(context.Background(), cfg); code != ExitBusy || errOut.String() != want || out.String() != "" {
			t.Errorf("quiet %v: exit %d, stdout %q, stderr %q; want %d and %q", quiet, code, out.String(), errOut.String(), ExitBusy, want)
		}
	}
}

// TestHoldPrintsTokenAndReleasesOnCancel: without a command the run
// prints the token and holds the lock until its context ends.
func TestHoldPrintsTokenAndReleasesOnCancel(t *testing.T) {
	srv := batontest.StartServer(t)
	var out, errOut batontest.SyncBuffer
	cfg := config(srv.Addr, "jobs/hold", &out, &errOut)
	cfg.Prog = "baton lock"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- Run(ctx, cfg) }()
	batontest.Eventually(t, 10*time.Second, func() bool { return strings.HasSuffix(out.String(), "\n") }, "baton lock printed no token")
	if !held(srv, "jobs/hold") {
		t.Fatal("jobs/hold is not held while the token is printed")
	}
	cancel()
	select {
	case code := <-done:
		if code != ExitOK || errOut.String() != "" {
			t.Errorf("exit %d, stderr %q after the cancel; want 0 and nothing", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the hold did not end after its context did")
	}
	batontest.Eventually(t, 10*time.Second, func() bool { return !held(srv, "jobs/hold") }, "jobs/hold is still held after the release")
}

// TestWaitStateLines: the live status and the -v line name the facts in
// order, the -v line without the time waited.
func TestWaitStateLines(t *testing.T) {
	t.Parallel()
	start := time.Unix(1000, 0)
	w := waitState{name: "pool", start: start, waiting: true, position: 1,
		info: lockInfo{known: true, held: true, holder: "host:123", holders: 3, limit: 3}}
	if got, want := w.line(start.Add(12*time.Second)), "waiting for pool: position 1, 12s, held by host:123 and 2 others, 3/3 slots"; got != want {
		t.Errorf("line = %q, want %q", got, want)
	}
	if got, want := w.changeLine(start.Add(12*time.Second)), "waiting for pool: position 1, held by host:123 and 2 others, 3/3 slots"; got != want {
		t.Errorf("changeLine = %q, want %q", got, want)
	}
	if got := (waitState{name: "x"}).changeLine(start); got != "waiting for x" {
		t.Errorf("changeLine with no facts = %q", got)
	}
}
