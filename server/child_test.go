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

	"github.com/batonlock/baton/clients/go/wire"
)

// A test that needs a process of its own (one whose descriptor table it
// fills, say) runs as a child: this test binary again, with -test.run
// naming that test and an environment variable that tells the test it is
// the child. The child says what the parent needs on its first line of
// output and ends when the parent closes its stdin.

// childProc is a child process of the test binary, seen from the parent.
type childProc struct {
	stdin  io.WriteCloser
	stdout *bufio.Reader
	// Logs is the child's stderr, kept in a file and read each time it is
	// printed: put it in a failure message.
	Logs childLog
}

// startChild runs test (the name of one test) in a child process with the
// environment variables env added. Cleanup closes the child's stdin, its
// signal to end, and waits for it.
func startChild(t *testing.T, test string, env ...string) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(t.TempDir(), "child.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
		logFile.Close()
	})
	return &childProc{stdin: stdin, stdout: bufio.NewReader(stdout), Logs: childLog(logFile.Name())}
}

// Line reads the child's next line of output, without its newline.
func (c *childProc) Line(t *testing.T) string {
	t.Helper()
	line, err := c.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("child: %v; %s", err, c.Logs)
	}
	return strings.TrimSuffix(line, "\n")
}

// Addr reads the child's first line, "addr HOST:PORT" (see awaitParent),
// and returns the address.
func (c *childProc) Addr(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(strings.TrimPrefix(c.Line(t), "addr "))
}

// End closes the child's stdin: it stops and says how it ended.
func (c *childProc) End() { c.stdin.Close() }

// childLog is a child's log file, read each time it is printed.
type childLog string

func (l childLog) String() string {
	b, _ := os.ReadFile(string(l))
	return string(b)
}

// childServer starts, in a child process, a server of cfg on 127.0.0.1
// with its logs on stderr, and one session granted by it, so that
// whatever the server opens once is open before the test counts
// descriptors. It returns the server, its listener and that session.
func childServer(t *testing.T, cfg Config) (*Server, net.Listener, net.Conn) {
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
	return s, ln, nc
}

// awaitParent tells the parent the child server's address (its first
// line, "addr HOST:PORT") and returns when the parent closes stdin.
func awaitParent(ln net.Listener) {
	fmt.Println("addr", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
}
