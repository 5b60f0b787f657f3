package peers

import (
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/internal/proc"
	"github.com/batonlock/baton/bench/internal/system"
)

// DflockdEnv names the dflockd binary when the -dflockd flag does not.
const DflockdEnv = "BENCH_DFLOCKD"

// DflockdHowTo is how to get the binary, for the message of a skip.
const DflockdHowTo = "git clone https://github.com/mtingers/dflockd && cd dflockd && git checkout v1.10.0 && go build ./cmd/dflockd"

// FindDflockd returns the dflockd binary to run: path if not empty, else
// $BENCH_DFLOCKD, else dflockd on PATH. The error wraps
// system.ErrUnavailable and says how to get one.
func FindDflockd(path string) (string, error) {
	from := "-dflockd"
	if path == "" {
		path, from = os.Getenv(DflockdEnv), "$"+DflockdEnv
	}
	if path == "" {
		found, err := exec.LookPath("dflockd")
		if err != nil {
			return "", fmt.Errorf("dflockd: %w: not on PATH, and neither -dflockd nor %s names it (get it with: %s)",
				system.ErrUnavailable, DflockdEnv, DflockdHowTo)
		}
		return found, nil
	}
	st, err := os.Stat(path)
	if err == nil && (st.IsDir() || st.Mode()&0o111 == 0) {
		err = errors.New("not an executable file")
	}
	if err != nil {
		return "", fmt.Errorf("dflockd: %w: %s %s: %v (get it with: %s)", system.ErrUnavailable, from, path, err, DflockdHowTo)
	}
	return path, nil
}

// DflockdServer is a running dflockd, a process of the bench's own.
type DflockdServer struct {
	Addr    string
	Version string
	p       *proc.Process
}

// dflockdStartTimeout bounds a start: the listening line and a first dial.
const dflockdStartTimeout = 15 * time.Second

// StartDflockd runs bin on 127.0.0.1 at a free port, with its defaults
// otherwise (a slot is given back when its connection closes), and waits
// until it accepts a connection.
func StartDflockd(ctx context.Context, bin string) (*DflockdServer, error) {
	version := dflockdVersion(ctx, bin)
	var lastErr error
	// The port is found free, let go, and taken by dflockd: another
	// process may take it in between, so a few tries.
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s, err := startDflockdAt(ctx, bin, port)
		if err == nil {
			s.Version = version
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, lastErr
}

func startDflockdAt(ctx context.Context, bin string, port int) (*DflockdServer, error) {
	// dflockd's DFLOCKD_* variables override its flags: none of the
	// caller's may move the server off the port chosen here.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DFLOCKD_") {
			env = append(env, kv)
		}
	}
	p, err := proc.StartEnv(env, bin, "--host", "127.0.0.1", "--port", strconv.Itoa(port))
	if err != nil {
		return nil, err
	}
	s := &DflockdServer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), p: p}
	err = p.Await(ctx, dflockdStartTimeout, func() bool {
		if !strings.Contains(p.Stderr(), "msg=listening") {
			return false
		}
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		conn, err := d.DialContext(dctx, "tcp", s.Addr)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
	switch {
	case errors.Is(err, proc.ErrExited):
		return nil, fmt.Errorf("dflockd %s exited before serving: %s", bin, strings.TrimSpace(p.Stderr()))
	case ctx.Err() != nil:
		s.Stop()
		return nil, ctx.Err()
	case err != nil:
		s.Stop()
		return nil, fmt.Errorf("dflockd %s (pid %d) did not serve %s within %v: %s", bin, p.PID(), s.Addr, dflockdStartTimeout, strings.TrimSpace(p.Stderr()))
	}
	return s, nil
}

// PID is the server's process id.
func (s *DflockdServer) PID() int { return s.p.PID() }

// Stop sends SIGTERM to the server's PID (SIGKILL after 5 s).
func (s *DflockdServer) Stop() error { return s.p.Stop(5 * time.Second) }

// freePort is a port of 127.0.0.1 that nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// dflockdVersion is the module version Go stamped in the binary (v1.10.0
// when built in a clone at that tag), with its commit; else what
// `dflockd --version` says (its Makefile's VERSION, "dev" by default).
func dflockdVersion(ctx context.Context, bin string) string {
	var commit string
	if bi, err := buildinfo.ReadFile(bin); err == nil {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 7 {
				commit = " (commit " + s.Value[:7] + ")"
			}
		}
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			return v + commit
		}
	}
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(vctx, bin, "--version").Output()
	if v := strings.TrimSpace(string(out)); err == nil && v != "" {
		return v + commit
	}
	return "unknown" + commit
}
