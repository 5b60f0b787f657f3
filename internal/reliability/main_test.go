package reliability

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/proctest"
)

// batonBin is the binary built by TestMain; empty in -short mode or
// without a go tool, and skipReason then says why.
var batonBin, skipReason string

// TestMain builds the baton binary once for every test, and fails the
// package if a goroutine outlives the tests.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	goTool, lookErr := exec.LookPath("go")
	switch {
	case isShort():
		skipReason = "runs the real binary; skipped in -short mode"
	case lookErr != nil:
		skipReason = fmt.Sprintf("no go tool to build the binary: %v", lookErr)
	default:
		dir, err := os.MkdirTemp("", "baton-reliability-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if batonBin, err = proctest.BuildBaton(goTool, dir, "baton"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return proctest.RunChecked(m)
}

// isShort reads -test.short before m.Run has parsed it.
func isShort() bool {
	for _, a := range os.Args[1:] {
		if a == "-test.short" || a == "-test.short=true" {
			return true
		}
	}
	return false
}

// needBinary skips the test when TestMain built no binary.
func needBinary(t *testing.T) {
	t.Helper()
	if batonBin == "" {
		t.Skip(skipReason)
	}
}

// Generous bounds for a loaded 2-core machine under -race: an event that
// should come "at once" comes well within eventWait.
const (
	eventWait = 5 * time.Second
	// promptly bounds what the promises call "at once" (a handover after
	// the holder's end): far below the leases the tests use for it.
	promptly = 2 * time.Second
)

// server is a `baton serve` child process.
type server struct {
	*proctest.Proc
	Addr, OpsAddr string
	DataDir       string
	log           *proctest.LogBuffer
}

// startServer runs `baton serve` on 127.0.0.1 with dataDir; flags come
// after the defaults, so they override them (-addr for a restart on the same
// port). It returns once the server logs its addresses.
func startServer(t *testing.T, dataDir string, flags ...string) *server {
	t.Helper()
	needBinary(t)
	args := append([]string{"serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0",
		"-shutdown-linger=0s", "-log-format=json", "-data-dir=" + dataDir}, flags...)
	s := &server{DataDir: dataDir, log: &proctest.LogBuffer{}}
	serving := make(chan servingLine, 1)
	line := func(l string) {
		s.log.Add(l)
		var sl servingLine
		if json.Unmarshal([]byte(l), &sl) == nil && sl.Msg == "baton serving" {
			serving <- sl
		}
	}
	s.Proc = proctest.Start(t, exec.Command(batonBin, args...), line, line)
	select {
	case sl := <-serving:
		s.Addr, s.OpsAddr = sl.Addr, sl.OpsAddr
	case <-s.Exited:
		t.Fatalf("baton serve exited with %d before serving; log:\n%s", s.Code, s.log)
	case <-time.After(2 * eventWait):
		t.Fatalf("baton serve did not report its addresses; log:\n%s", s.log)
	}
	return s
}

type servingLine struct {
	Msg     string `json:"msg"`
	Addr    string `json:"addr"`
	OpsAddr string `json:"ops_addr"`
}

// restartServer starts a new server on the address and data directory of
// old, which must have exited. The port is free again at once (listeners
// use SO_REUSEADDR), but another process could take it meanwhile: then the
// test fails with the server's log, rather than pass against a stranger.
func restartServer(t *testing.T, old *server, flags ...string) *server {
	t.Helper()
	<-old.Exited
	return startServer(t, old.DataDir, append([]string{"-addr=" + old.Addr}, flags...)...)
}

// opsClient talks to the ops API; no connection outlives a request, so
// none outlives the test.
var opsClient = &http.Client{Timeout: eventWait, Transport: &http.Transport{DisableKeepAlives: true}}

// lockView is one lock of GET /v1/locks.
type lockView struct {
	Name   string `json:"name"`
	Holder *struct {
		Owner string  `json:"owner"`
		Token *uint64 `json:"token"`
	} `json:"holder"`
	Waiters []struct {
		Owner string `json:"owner"`
	} `json:"waiters"`
}

// locks reads the server's lock table through the ops API.
func (s *server) locks(t *testing.T) map[string]lockView {
	t.Helper()
	resp, err := opsClient.Get("http://" + s.OpsAddr + "/v1/locks")
	if err != nil {
		t.Fatalf("GET /v1/locks: %v", err)
	}
	defer resp.Body.Close()
	var body struct {
		Locks []lockView `json:"locks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET /v1/locks: %v", err)
	}
	out := map[string]lockView{}
	for _, l := range body.Locks {
		out[l.Name] = l
	}
	return out
}

// waitWaiters waits until lock name has n waiters.
func (s *server) waitWaiters(t *testing.T, name string, n int) {
	t.Helper()
	batontest.Eventually(t, eventWait, func() bool { return len(s.locks(t)[name].Waiters) == n },
		"lock %q: want %d waiters; locks: %+v", name, n, s.locks(t))
}

// runner is a `baton run` child process; its command's output lines
// arrive, timestamped, on out.
type runner struct {
	*proctest.Proc
	out    chan outLine
	stderr *proctest.LogBuffer

	mu   sync.Mutex
	pids []int // the commands' process groups, killed at cleanup
}

type outLine struct {
	at   time.Time
	text string
}

// startRunner runs `baton run -addr addr -lease lease name -- sh -c script`.
func startRunner(t *testing.T, addr, name string, lease time.Duration, script string) *runner {
	t.Helper()
	needBinary(t)
	r := &runner{out: make(chan outLine, 100), stderr: &proctest.LogBuffer{}}
	cmd := exec.Command(batonBin, "run", "-v", "-addr="+addr, "-lease="+lease.String(),
		"-kill-grace=1s", "-owner="+name+"-"+fmt.Sprint(time.Now().UnixNano()), name, "--", "sh", "-c", script)
	r.Proc = proctest.Start(t, cmd, func(l string) {
		select {
		case r.out <- outLine{at: time.Now(), text: l}:
		default: // a test that does not read its output
		}
	}, r.stderr.Add)
	// Runs before the process's own cleanup: a command left running would
	// hold the output pipe open.
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, pid := range r.pids {
			syscall.Kill(-pid, syscall.SIGCONT)
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
	return r
}

// expectLine waits for the command's next output line.
func (r *runner) expectLine(t *testing.T, timeout time.Duration) outLine {
	t.Helper()
	select {
	case l := <-r.out:
		return l
	case <-r.Exited:
		// Lines written just before the end may still be in the pipe.
		r.Readers.Wait()
		select {
		case l := <-r.out:
			return l
		default:
		}
		t.Fatalf("baton run exited %d with no (more) output; stderr:\n%s", r.Code, r.stderr)
	case <-time.After(timeout):
		t.Fatalf("no output from the command within %v; stderr:\n%s", timeout, r.stderr)
	}
	return outLine{}
}

// started waits for the line "start TOKEN PID" that the tests' commands
// print first, and returns it with its token and the command's pid (also
// its process group).
func (r *runner) started(t *testing.T, timeout time.Duration) (l outLine, token uint64, pid int) {
	t.Helper()
	l = r.expectLine(t, timeout)
	if _, err := fmt.Sscanf(l.text, "start %d %d", &token, &pid); err != nil {
		t.Fatalf("command printed %q, want \"start TOKEN PID\": %v", l.text, err)
	}
	r.mu.Lock()
	r.pids = append(r.pids, pid)
	r.mu.Unlock()
	return l, token, pid
}

// startScript prints "start $BATON_TOKEN $$" and then runs rest.
func startScript(rest string) string {
	return `echo start "$BATON_TOKEN" $$; ` + rest
}

// processGone reports whether pid no longer exists (or is a zombie no one
// reaped, which runs nothing either).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}

// rawConn is a protocol client on a plain connection, for peers that
// misbehave on purpose.
type rawConn struct {
	net.Conn
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, eventWait)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{nc}
}

func (c *rawConn) send(t *testing.T, b []byte) {
	t.Helper()
	c.SetWriteDeadline(time.Now().Add(eventWait))
	if _, err := c.Write(b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func acquireFrame(t testing.TB, name string, lease time.Duration, noWait bool) []byte {
	a := wire.Acquire{Version: wire.Version, LeaseMs: uint32(lease / time.Millisecond), Name: name, Owner: "reliability"}
	if noWait {
		a.Flags = wire.FlagNoWait
	}
	b, err := wire.AppendAcquire(nil, a)
	if err != nil {
		t.Fatalf("encode ACQUIRE: %v", err)
	}
	return b
}

// frame is one frame from the server.
type frame struct {
	typ   wire.Type
	push  bool
	token uint64
	pos   uint32
	err   *wire.Error
}

func (f frame) String() string {
	switch f.typ {
	case wire.TypeAcquired:
		return fmt.Sprintf("ACQUIRED push=%v token=%d", f.push, f.token)
	case wire.TypeWaiting:
		return fmt.Sprintf("WAITING %d", f.pos)
	case wire.TypeError:
		return "ERROR " + f.err.Error()
	}
	return f.typ.String()
}

// read reads one frame within timeout, or returns the error.
func (c *rawConn) read(timeout time.Duration) (frame, error) {
	c.SetReadDeadline(time.Now().Add(timeout))
	var hdr [wire.HeaderSize]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return frame{}, err
	}
	h, err := wire.ParseHeader(hdr[:])
	if err != nil {
		return frame{}, err
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(c, p); err != nil {
		return frame{}, err
	}
	f := frame{typ: h.Type}
	switch h.Type {
	case wire.TypeAcquired:
		f.push, f.token, err = wire.DecodeAcquired(p)
	case wire.TypeWaiting:
		f.pos, err = wire.DecodeWaiting(p)
	case wire.TypeError:
		f.err, err = wire.DecodeError(p)
	default:
		err = fmt.Errorf("unexpected frame type %v", h.Type)
	}
	return f, err
}

func (c *rawConn) expect(t *testing.T, timeout time.Duration) frame {
	t.Helper()
	f, err := c.read(timeout)
	if err != nil {
		t.Fatalf("read frame: %v", err)
	}
	return f
}

// hold takes lock name on a new raw connection and returns it with its token.
func hold(t *testing.T, addr, name string, lease time.Duration) (*rawConn, uint64) {
	t.Helper()
	c := dialRaw(t, addr)
	c.send(t, acquireFrame(t, name, lease, false))
	f := c.expect(t, eventWait)
	if f.typ != wire.TypeAcquired || f.push {
		t.Fatalf("ACQUIRE %q: got %v, want ACQUIRED", name, f)
	}
	return c, f.token
}

// queue enters a new raw connection in the queue of name at position pos.
func queue(t *testing.T, addr, name string, lease time.Duration, pos uint32) *rawConn {
	t.Helper()
	c := dialRaw(t, addr)
	c.send(t, acquireFrame(t, name, lease, false))
	if f := c.expect(t, eventWait); f.typ != wire.TypeWaiting || f.pos != pos {
		t.Fatalf("ACQUIRE %q: got %v, want WAITING %d", name, f, pos)
	}
	return c
}

// heartbeat sends a HEARTBEAT and returns the reply.
func (c *rawConn) heartbeat(t *testing.T) frame {
	t.Helper()
	c.send(t, wire.AppendHeartbeat(nil))
	return c.expect(t, eventWait)
}

// expectHolds checks with a heartbeat that c still holds its lock with token.
func (c *rawConn) expectHolds(t *testing.T, token uint64) {
	t.Helper()
	if f := c.heartbeat(t); f.typ != wire.TypeAcquired || f.push || f.token != token {
		t.Fatalf("heartbeat of the holder: got %v, want ACQUIRED token=%d", f, token)
	}
}

// expectPush waits for the promotion push and returns its token.
func (c *rawConn) expectPush(t *testing.T, timeout time.Duration) uint64 {
	t.Helper()
	f := c.expect(t, timeout)
	if f.typ != wire.TypeAcquired || !f.push {
		t.Fatalf("got %v, want the ACQUIRED push", f)
	}
	return f.token
}

// expectClosed waits for the server to close c, skipping frames it sent
// before (an ERROR); it returns the time the close was seen.
func (c *rawConn) expectClosed(t *testing.T, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, err := c.read(time.Until(deadline))
		if err == nil {
			continue
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("connection still open after %v", timeout)
		}
		return time.Now()
	}
}

// metric reads the value of the sample whose line starts with series (name
// and labels, as in `baton_sessions_ended_total{reason="write_timeout"}`)
// from the server's /metrics; 0 if absent.
func (s *server) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := opsClient.Get("http://" + s.OpsAddr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err != nil {
				t.Fatalf("metric %s: %q: %v", series, rest, err)
			}
			return v
		}
	}
	return 0
}

// ctxFor is a context that ends with the test.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}
