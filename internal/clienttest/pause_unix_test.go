//go:build unix

package clienttest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/proctest"
)

// TestPausedHolder: a holder whose whole process is stopped (SIGSTOP) past
// its lease, while the server hands the lock to a waiter, is told of the
// loss by the first check it makes after it resumes (SIGCONT), before its
// next step of work: the check reads the clock, and does not wait for
// the lock's own goroutines to run and notice. The holder is a child
// process (pausedHolder, in the test binary); the server is the baton
// binary built from ./cmd/baton.
func TestPausedHolder(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the baton binary; skipped in -short mode")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to build the baton binary: %v", err)
	}
	bin, err := proctest.BuildBaton(goTool, t.TempDir(), "baton")
	if err != nil {
		t.Fatal(err)
	}
	srvAddr := startBatonBinary(t, bin)
	for _, mode := range []string{"Lock.Err", "ctx.Err"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			name := "paused/" + mode
			holder, lines := startPausedHolder(t, srvAddr, mode)
			for round := 1; round <= pausedRounds; round++ {
				pauseRound(t, holder, lines, srvAddr, name, round)
			}
			if code := holder.Wait(t, 10*time.Second); code != 0 {
				t.Errorf("holder exited %d", code)
			}
		})
	}
}

// pauseRound is one round of TestPausedHolder: the holder holds name, a
// waiter queues, the holder is stopped until the waiter is granted, and
// is resumed; its report must tell the loss.
func pauseRound(t *testing.T, holder *proctest.Proc, lines <-chan string, srvAddr, name string, round int) {
	t.Helper()
	first := expectLine(t, lines, 10*time.Second)
	var token1 uint64
	if _, err := fmt.Sscanf(first, "held %d", &token1); err != nil {
		t.Fatalf("round %d: holder printed %q, want \"held TOKEN\"", round, first)
	}
	waiter := batontest.Dial(t, srvAddr)
	defer waiter.Conn.Close() // the release, for the next round
	waiter.Acquire(name, 30*time.Second, false, "waiter")
	if f := waiter.ReadFrame(5 * time.Second); f.Type != wire.TypeWaiting {
		t.Fatalf("round %d: waiter got %v, want WAITING", round, f)
	}

	holder.Signal(t, syscall.SIGSTOP)
	stoppedAt := time.Now()
	f := waiter.ReadFrame(10 * pausedLease)
	if f.Type != wire.TypeAcquired || !f.Push || f.Token <= token1 {
		t.Fatalf("round %d: waiter got %v, want the ACQUIRED push with a token above %d", round, f, token1)
	}
	granted := time.Since(stoppedAt).Round(time.Millisecond)
	select {
	case l := <-lines:
		t.Fatalf("round %d: the holder printed %q while stopped", round, l)
	default:
	}

	holder.Signal(t, syscall.SIGCONT)
	report := expectLine(t, lines, 10*time.Second)
	t.Logf("round %d: holder stopped, waiter granted %v later; resumed, the holder says: %s", round, granted, report)
	if !strings.HasPrefix(report, "resumed after ") {
		t.Fatalf("round %d: holder printed %q, want its first check after the resume", round, report)
	}
	if !strings.Contains(report, "lost=true") {
		t.Errorf("round %d: the first check after the resume reported the lock held (%s), want the loss: the waiter holds it since token %d", round, report, f.Token)
	}
}

// startBatonBinary runs `baton serve` from bin on 127.0.0.1 and returns its
// protocol address once it logs it.
func startBatonBinary(t *testing.T, bin string) string {
	t.Helper()
	log := &proctest.LogBuffer{}
	serving := make(chan string, 1)
	line := func(l string) {
		log.Add(l)
		var sl struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(l), &sl) == nil && sl.Msg == "baton serving" {
			serving <- sl.Addr
		}
	}
	p := proctest.Start(t, exec.Command(bin, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0",
		"-shutdown-linger=0s", "-log-format=json", "-data-dir="+t.TempDir()), line, line)
	select {
	case addr := <-serving:
		return addr
	case <-p.Exited:
		t.Fatalf("baton serve exited with %d before serving; log:\n%s", p.Code, log)
	case <-time.After(20 * time.Second):
		t.Fatalf("baton serve did not report its address; log:\n%s", log)
	}
	return ""
}

// startPausedHolder runs this test binary as pausedHolder; its output lines
// arrive on the channel.
func startPausedHolder(t *testing.T, addr, mode string) (*proctest.Proc, <-chan string) {
	t.Helper()
	lines := make(chan string, 16)
	stderr := &proctest.LogBuffer{}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1", pausedHolderEnv+"="+addr, pausedHolderMode+"="+mode)
	p := proctest.Start(t, cmd, func(l string) { lines <- l }, stderr.Add)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("holder's stderr:\n%s", stderr)
		}
	})
	return p, lines
}

func expectLine(t *testing.T, lines <-chan string, within time.Duration) string {
	t.Helper()
	select {
	case l := <-lines:
		return l
	case <-time.After(within):
		t.Fatalf("no line from the holder within %v", within)
		return ""
	}
}
