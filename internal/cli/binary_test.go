package cli

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/proctest"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// buildBaton builds the real binary once per test run.
func buildBaton(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary; skipped in -short mode")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to build the binary: %v", err)
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "baton-cli-test-")
		if err != nil {
			buildErr = err
			return
		}
		binPath, buildErr = proctest.BuildBaton(goTool, dir, "baton")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// batonCmd is the binary with args, run in a temporary directory with an
// environment free of BATON_ variables.
func batonCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(buildBaton(t), args...)
	cmd.Dir = t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BATON_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	return cmd
}

func TestBinaryServeSIGTERM(t *testing.T) {
	t.Parallel()
	cmd := batonCmd(t, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-shutdown-linger=200ms")
	cmd.Env = append(cmd.Env, "BATON_LOG_FORMAT=json")
	l := startLogged(t, cmd)
	sl := waitServing(t, l.next)
	if want := filepath.Join(cmd.Dir, "baton-data"); sl.DataDir != want {
		t.Errorf("data_dir %q, want %q (the default, in the working directory)", sl.DataDir, want)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	if got := httpGet(t, hc, "http://"+sl.OpsAddr+"/healthz"); got != http.StatusOK {
		t.Errorf("GET /healthz: %d, want 200", got)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	logged := l.drain(t)
	select {
	case err := <-l.waited:
		l.waited <- err // for the cleanup
		if err != nil {
			t.Errorf("baton serve after SIGTERM: %v, want exit 0; log:\n%s", err, logged)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("baton serve did not exit after SIGTERM")
	}
	if !strings.Contains(logged, `"msg":"shutting down"`) || !strings.Contains(logged, "terminated") {
		t.Errorf("log lacks the shutdown line naming the signal:\n%s", logged)
	}
}

// loggedCmd is a started command whose JSON log lines (stderr) are read
// in the background.
type loggedCmd struct {
	lines  chan string
	seen   []string
	waited chan error
}

func startLogged(t *testing.T, cmd *exec.Cmd) *loggedCmd {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = pw
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		t.Fatal(err)
	}
	l := &loggedCmd{lines: make(chan string, 1000), waited: make(chan error, 1)}
	go func() { l.waited <- cmd.Wait() }()
	go func() {
		defer close(l.lines)
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			l.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-l.waited
		for range l.lines {
		}
	})
	return l
}

func (l *loggedCmd) next() (string, bool) {
	select {
	case s, ok := <-l.lines:
		if ok {
			l.seen = append(l.seen, s)
		}
		return s, ok
	case <-time.After(10 * time.Second):
		return "", false
	}
}

// waitFor reads log lines until one has message msg.
func (l *loggedCmd) waitFor(t *testing.T, msg string) {
	t.Helper()
	for {
		s, ok := l.next()
		if !ok {
			t.Fatalf("no %q line in the log:\n%s", msg, strings.Join(l.seen, "\n"))
		}
		var m struct{ Msg string }
		if json.Unmarshal([]byte(s), &m) == nil && m.Msg == msg {
			return
		}
	}
}

// drain reads the log to its end (the process exits) and returns it all.
func (l *loggedCmd) drain(t *testing.T) string {
	t.Helper()
	for _, ok := l.next(); ok; _, ok = l.next() {
	}
	return strings.Join(l.seen, "\n")
}

func TestBinaryUsageError(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "-io-timeout=x"},
		{"serve", "-nope"},
		{"frobnicate"},
		{},
	} {
		cmd := batonCmd(t, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != 2 {
			t.Errorf("baton %q: exit code %d (%v), want 2", args, code, err)
		}
		if stdout.Len() != 0 {
			t.Errorf("baton %q: stdout %q, want nothing", args, stdout.String())
		}
		if l := lines(stderr.String()); len(l) != 1 {
			t.Errorf("baton %q: stderr %q, want one line", args, stderr.String())
		}
		if _, err := os.Stat(filepath.Join(cmd.Dir, "baton-data")); !os.IsNotExist(err) {
			t.Errorf("baton %q: baton-data exists after a usage error (stat: %v)", args, err)
		}
	}
}

func TestBinaryVersion(t *testing.T) {
	t.Parallel()
	out, err := batonCmd(t, "version").Output()
	if err != nil {
		t.Fatalf("baton version: %v", err)
	}
	if !strings.HasPrefix(string(out), "baton ") {
		t.Errorf("baton version: %q, want \"baton VERSION ...\"", out)
	}
}

// TestBinaryBindFailureLeavesDataDir: a serve that cannot bind its port
// exits 1 without touching the data directory, so no epoch is spent and no
// crash grace is started by a start that never served.
func TestBinaryBindFailureLeavesDataDir(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for flag, other := range map[string]string{"-addr": "-ops-addr", "-ops-addr": "-addr"} {
		cmd := batonCmd(t, "serve", flag, taken.Addr().String(), other, "127.0.0.1:0")
		dataDir := filepath.Join(cmd.Dir, "baton-data")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != 1 {
			t.Errorf("serve %s %s (in use): exit code %d, want 1; stderr %q", flag, taken.Addr(), code, stderr.String())
		}
		if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
			t.Errorf("serve %s on a port in use: data dir %s exists (stat: %v), want untouched", flag, dataDir, err)
		}
	}
}
