package cli

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// startServeBinary runs `baton serve` on free ports with dataDir and returns
// the process and its protocol address, read from the "baton serving" line.
// extra flags follow the others.
func startServeBinary(t *testing.T, dataDir string, extra ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd, sl := startServeBinaryLine(t, dataDir, extra...)
	return cmd, sl.Addr
}

// startServeBinaryLine is startServeBinary with the whole "baton serving"
// line (both addresses and the epoch).
func startServeBinaryLine(t *testing.T, dataDir string, extra ...string) (*exec.Cmd, servingLine) {
	t.Helper()
	cmd := batonCmd(t, append([]string{"serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0",
		"-shutdown-linger=0s", "-data-dir=" + dataDir, "-log-format=json"}, extra...)...)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		pw.Close()
		pr.Close()
		t.Fatal(err)
	}
	pw.Close()
	lines := make(chan string, 100)
	go func() { // ends when the process closes its stderr
		defer close(lines)
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody reads the log after start-up
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	next := func() (string, bool) {
		select {
		case l, ok := <-lines:
			return l, ok
		case <-time.After(10 * time.Second):
			return "", false
		}
	}
	return cmd, waitServing(t, next)
}

// grantToken acquires a fresh lock name on addr and returns its token.
func grantToken(t *testing.T, addr, name string) uint64 {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b, err := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 5000, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	h, p := readFrame(t, conn)
	if h.Type != wire.TypeAcquired {
		t.Fatalf("got %v, want ACQUIRED", h.Type)
	}
	_, tok, err := wire.DecodeAcquired(p)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestBinaryTokensRiseAcrossKill9AndRestart: with the same -data-dir, the
// first token after a kill -9, and after a clean stop, is greater than every
// token granted before. (No crash grace period, so that the first ACQUIRE
// after the kill is granted at once: grace_binary_test.go tests it.)
func TestBinaryTokensRiseAcrossKill9AndRestart(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	var highest uint64
	for run, stop := range []string{"kill -9", "SIGTERM", "end"} {
		cmd, addr := startServeBinary(t, dataDir, "-crash-grace-max=0s")
		// "jobs" is the name whose tokens must rise across runs; the others
		// show that tokens also rise within a run. (Distinct names, since a
		// closed holder of "jobs" may not have left before the next ACQUIRE.)
		for i, name := range []string{"jobs", "a", "b"} {
			tok := grantToken(t, addr, name)
			if tok <= highest {
				t.Fatalf("run %d grant %d: token %d, want more than %d (granted before)", run, i, tok, highest)
			}
			highest = tok
		}
		switch stop {
		case "kill -9":
			cmd.Process.Signal(syscall.SIGKILL)
		case "SIGTERM":
			cmd.Process.Signal(syscall.SIGTERM)
		default:
			return
		}
		cmd.Wait()
	}
}
