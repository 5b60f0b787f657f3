package server

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// reserveSessions is how many spare descriptors the child of
// TestReserveServesSessionsWhenFull holds, and so how many sessions it
// must serve with every other descriptor taken.
const reserveSessions = 8

// TestReserveServesSessionsWhenFull: with every descriptor of the process
// taken by something else (here files; in production, say, idle ops
// connections), the protocol listener still admits as many sessions as it
// holds spare descriptors, at once, not after a backoff. The server runs
// in a child process (this test again), which fills its descriptor table.
func TestReserveServesSessionsWhenFull(t *testing.T) {
	if os.Getenv("BATON_TEST_RESERVE_CHILD") == "1" {
		reserveChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReserveServesSessionsWhenFull$")
	cmd.Env = append(os.Environ(), "BATON_TEST_RESERVE_CHILD=1")
	stdin, _ := cmd.StdinPipe() // the child ends when it closes
	stdout, _ := cmd.StdoutPipe()
	logFile, err := os.Create(filepath.Join(t.TempDir(), "child.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd.Stderr = logFile
	logs := childLog(logFile.Name())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("child: %v; %s", err, logs)
	}
	addr := strings.TrimSpace(strings.TrimPrefix(line, "addr "))
	for i := range reserveSessions {
		nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		frame, _ := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 30000, Name: fmt.Sprint("full-", i)})
		nc.Write(frame)
		// Well within the first backoff steps' sum: served from the
		// reserve, not by a retry once something closed.
		nc.SetReadDeadline(time.Now().Add(2 * time.Second))
		var reply [12]byte
		if _, err := io.ReadFull(nc, reply[:]); err != nil || wire.Type(reply[0]) != wire.TypeAcquired {
			t.Fatalf("session %d of %d with every descriptor taken: reply % x, %v; want ACQUIRED; %s", i+1, reserveSessions, reply, err, logs)
		}
	}
}

func reserveChild(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ReserveFDs = reserveSessions
	var next atomic.Uint64
	cfg.NextToken = func() uint64 { return next.Add(1) }
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(t.Context(), cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	// One session first, so that whatever the server opens once is open.
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	frame, _ := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 30000, Name: "warm"})
	nc.Write(frame)
	var reply [12]byte
	if _, err := io.ReadFull(nc, reply[:]); err != nil {
		t.Fatal(err)
	}
	// Every free descriptor taken, as idle ops connections would take them.
	var hogs []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		hogs = append(hogs, f)
	}
	fmt.Fprintln(os.Stderr, "child: took", len(hogs), "descriptors")
	fmt.Println("addr", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	for _, f := range hogs {
		f.Close()
	}
	nc.Close()
	s.Shutdown(t.Context())
}
