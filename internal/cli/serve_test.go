package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// occupied returns the address of a loopback port that is in use until the
// test ends.
func occupied(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

func TestServeStartFailures(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	emptyToken := filepath.Join(dir, "empty-token")
	if err := os.WriteFile(emptyToken, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	aFile := filepath.Join(dir, "a-file")
	if err := os.WriteFile(aFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string // on the one stderr line
	}{
		{"token file missing", []string{"-admin-token-file", filepath.Join(dir, "nope")}, "baton serve: admin-token-file: open "},
		{"token file empty", []string{"-admin-token-file", emptyToken}, "baton serve: admin-token-file " + emptyToken + " is empty"},
		{"data dir is a file", []string{"-data-dir", aFile}, "baton serve: data-dir " + aFile + ": "},
		{"data dir under a file", []string{"-data-dir", filepath.Join(aFile, "sub")}, "baton serve: data-dir "},
		{"addr in use", []string{"-addr", occupied(t)}, "baton serve: addr: listen tcp "},
		{"ops-addr in use", []string{"-ops-addr", occupied(t)}, "baton serve: ops-addr: listen tcp "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-data-dir", t.TempDir()}, tt.args...)
			code, stdout, stderr := runCLI(t, nil, args...)
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			if l := lines(stderr); len(l) != 1 || !strings.Contains(l[0], tt.want) {
				t.Errorf("stderr %q, want one line with %q", stderr, tt.want)
			}
		})
	}
}

// TestServeOpsAddrInUseReleasesAddr checks that the protocol listener,
// bound before the ops one failed, is closed again.
func TestServeOpsAddrInUseReleasesAddr(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	code, _, stderr := runCLI(t, nil, "serve", "-addr", addr, "-ops-addr", occupied(t), "-data-dir", t.TempDir())
	if code != 1 {
		t.Fatalf("exit code %d (stderr %q), want 1", code, stderr)
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("protocol address still bound after the failed start: %v", err)
	}
	ln.Close()
}

// servingLine is the "baton serving" log line, in JSON.
type servingLine struct {
	Msg     string `json:"msg"`
	Addr    string `json:"addr"`
	OpsAddr string `json:"ops_addr"`
	DataDir string `json:"data_dir"`
	Epoch   uint64 `json:"epoch"`
}

// waitServing waits for the "baton serving" line among the JSON log lines
// that next gives, one at a time, until deadline.
func waitServing(t *testing.T, next func() (string, bool)) servingLine {
	t.Helper()
	for {
		l, ok := next()
		if !ok {
			t.Fatal(`no "baton serving" line in the log`)
		}
		var sl servingLine
		if err := json.Unmarshal([]byte(l), &sl); err != nil {
			t.Fatalf("log line %q is not JSON: %v", l, err)
		}
		if sl.Msg == "baton serving" {
			return sl
		}
	}
}

// httpGet returns the status of GET url, or 0 if the request failed.
func httpGet(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// readFrame reads one frame from conn.
func readFrame(t *testing.T, conn net.Conn) (wire.Header, []byte) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, wire.HeaderSize)
	if _, err := io.ReadFull(conn, hdr); err != nil {
		t.Fatalf("read frame header: %v", err)
	}
	h, err := wire.ParseHeader(hdr)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(conn, p); err != nil {
		t.Fatalf("read %v payload: %v", h.Type, err)
	}
	return h, p
}

// TestServeEndToEnd runs baton serve in-process: both listeners answer, a
// session acquires a lock, and cancelling ctx shuts down as
// docs/operations.md says.
func TestServeEndToEnd(t *testing.T) {
	t.Parallel()
	const linger = 1500 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	dataDir := t.TempDir()
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte(" e2e-token-of-32-characters-or-more\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"BATON_LOG_FORMAT": "json", "BATON_ADMIN_TOKEN_FILE": tokenFile}
	done := make(chan int, 1)
	go func() {
		s := &sys{stdout: io.Discard, stderr: pw, lookupEnv: fakeEnv(env)}
		done <- run(ctx, []string{"serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0",
			"-data-dir", dataDir, "-shutdown-linger", linger.String()}, s)
		pw.Close()
	}()
	logLines := make(chan string, 100)
	go func() {
		defer close(logLines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			logLines <- sc.Text()
		}
		io.Copy(io.Discard, pr)
	}()
	// However the test ends, the server stops and its log is drained, so
	// no goroutine outlives the test.
	t.Cleanup(func() {
		cancel()
		for range logLines {
		}
	})
	var logged []string
	next := func() (string, bool) {
		select {
		case l, ok := <-logLines:
			if ok {
				logged = append(logged, l)
			}
			return l, ok
		case <-time.After(10 * time.Second):
			return "", false
		}
	}
	sl := waitServing(t, next)
	if sl.DataDir != dataDir || sl.Epoch != 1 {
		t.Errorf("serving with data_dir %q, epoch %d; want %q, 1", sl.DataDir, sl.Epoch, dataDir)
	}

	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	ops := "http://" + sl.OpsAddr
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if got := httpGet(t, hc, ops+path); got != http.StatusOK {
			t.Errorf("GET %s: %d, want 200", path, got)
		}
	}

	conn, err := net.Dial("tcp", sl.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	frame, err := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 30000, Name: "cli/e2e", Owner: "cli-test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	h, p := readFrame(t, conn)
	if h.Type != wire.TypeAcquired {
		t.Fatalf("answer to ACQUIRE: %v, want ACQUIRED", h.Type)
	}
	if _, token, err := wire.DecodeAcquired(p); err != nil || token == 0 {
		t.Fatalf("ACQUIRED: token %d, %v", token, err)
	}

	// The admin token from the file, trimmed, guards /v1/.
	if got := httpGet(t, hc, ops+"/v1/locks"); got != http.StatusUnauthorized {
		t.Errorf("GET /v1/locks without the token: %d, want 401", got)
	}
	req, err := http.NewRequest("GET", ops+"/v1/locks/cli%2Fe2e", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer e2e-token-of-32-characters-or-more")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"owner":"cli-test"`) {
		t.Errorf("GET /v1/locks/cli%%2Fe2e with the token: %d %s, want 200 and the holder", resp.StatusCode, body)
	}

	cancelled := time.Now()
	cancel()
	h, p = readFrame(t, conn)
	if h.Type != wire.TypeError {
		t.Fatalf("after shutdown began: %v, want ERROR", h.Type)
	}
	if e, err := wire.DecodeError(p); err != nil || e.Code != wire.CodeShutdown {
		t.Fatalf("after shutdown began: %v, %v; want ERROR SHUTDOWN", e, err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("after ERROR SHUTDOWN: read %d bytes, %v; want EOF", n, err)
	}
	conn.Close() // as a client does on EOF; the server waits for it a while

	// During the linger: not ready, but healthy.
	deadline := time.Now().Add(linger)
	for httpGet(t, hc, ops+"/readyz") != http.StatusServiceUnavailable {
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not turn 503 during the linger")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := httpGet(t, hc, ops+"/healthz"); got != http.StatusOK {
		t.Errorf("GET /healthz during the linger: %d, want 200", got)
	}
	select {
	case code := <-done:
		t.Fatalf("Run returned %d before the linger ended", code)
	default:
	}
	// The listener closed before ERROR SHUTDOWN was sent. A dial can still
	// be taken for a moment by a copy of the socket in a child being forked
	// by a parallel test (the copy lives until that child's exec), so look
	// again before calling it open.
	refused := false
	for end := time.Now().Add(linger / 3); !refused && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", sl.Addr)
		if err != nil {
			refused = true
		} else {
			c.Close()
		}
	}
	if !refused {
		t.Error("protocol listener still accepts during the linger")
	}

	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("Run returned %d, want 0", code)
		}
		// The linger starts after the protocol side has shut down, so it
		// is a lower bound however slow the machine.
		if d := time.Since(cancelled); d < linger {
			t.Errorf("Run returned %v after the cancel, want at least the linger of %v", d, linger)
		}
	case <-time.After(linger + 10*time.Second):
		t.Fatal("Run did not return after the linger")
	}
	for _, ok := next(); ok; _, ok = next() {
	}
	if got := httpGet(t, hc, ops+"/healthz"); got != 0 {
		t.Errorf("GET /healthz after Run returned: %d, want no answer", got)
	}
	var sawStop bool
	for _, l := range logged {
		sawStop = sawStop || strings.Contains(l, `"msg":"baton stopped"`)
	}
	if !sawStop {
		t.Errorf("no \"baton stopped\" line in the log:\n%s", strings.Join(logged, "\n"))
	}
}
