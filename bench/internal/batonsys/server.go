// Package batonsys is Baton as a system under test: the real server binary
// run as a separate process (stopped by its PID), its memory and CPU read
// from /proc and /metrics, and the real Go client.
package batonsys

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/internal/proc"
)

// Build compiles ../cmd/baton from the repository at root into dir, with
// the build tags tags (comma-separated; none if empty), and returns the
// binary's path.
func Build(ctx context.Context, root, dir, tags string) (string, error) {
	bin := filepath.Join(dir, "baton")
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", tags, "-o", bin, "./cmd/baton")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build baton in %s: %w: %s", root, err, out)
	}
	return bin, nil
}

// Server is a running `baton serve`.
type Server struct {
	// Addr is the protocol address; for a listener on every address
	// (extra "-addr 0.0.0.0:0"), its port on 127.0.0.1, with Everywhere
	// set: then any 127.0.0.0/8 address reaches it too.
	Addr       string
	Everywhere bool
	OpsAddr    string // ops HTTP address
	p          *proc.Process
	dataDir    string
}

var servingLine = regexp.MustCompile(`msg="baton serving".* addr=(\S+) ops_addr=(\S+)`)

// StartServer runs bin serve on 127.0.0.1 ports chosen by the kernel, with
// a fresh data directory under dir, and waits for its "baton serving" line.
func StartServer(ctx context.Context, bin, dir string, extra ...string) (*Server, error) {
	return startServer(ctx, nil, bin, dir, extra)
}

// StartServerIn is StartServer in the network namespace netns, through
// `ip netns exec` (which execs bin: the PID is the server's). Its
// addresses are the namespace's.
func StartServerIn(ctx context.Context, netns, bin, dir string, extra ...string) (*Server, error) {
	return startServer(ctx, []string{"ip", "netns", "exec", netns}, bin, dir, extra)
}

func startServer(ctx context.Context, prefix []string, bin, dir string, extra []string) (*Server, error) {
	dataDir, err := os.MkdirTemp(dir, "data-")
	if err != nil {
		return nil, err
	}
	args := append([]string{"serve", "-addr", "127.0.0.1:0", "-ops-addr", "127.0.0.1:0",
		"-data-dir", dataDir, "-shutdown-linger", "0s"}, extra...)
	if len(prefix) > 0 {
		args = append(append(prefix[1:len(prefix):len(prefix)], bin), args...)
		bin = prefix[0]
	}
	p, err := proc.Start(bin, args...)
	if err != nil {
		return nil, err
	}
	s := &Server{p: p, dataDir: dataDir}
	var m []string
	err = p.Await(ctx, 15*time.Second, func() bool {
		m = servingLine.FindStringSubmatch(p.Stderr())
		return m != nil
	})
	switch {
	case errors.Is(err, proc.ErrExited):
		return nil, fmt.Errorf("baton serve exited before serving: %s", p.Stderr())
	case ctx.Err() != nil:
		s.Stop()
		return nil, ctx.Err()
	case err != nil:
		s.Stop()
		return nil, fmt.Errorf("baton serve (pid %d) did not report its addresses within 15s: %s", p.PID(), p.Stderr())
	}
	s.Addr, s.OpsAddr = m[1], m[2]
	if host, port, err := net.SplitHostPort(s.Addr); err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			s.Addr, s.Everywhere = net.JoinHostPort("127.0.0.1", port), true
		}
	}
	return s, nil
}

// PID is the server's process id.
func (s *Server) PID() int { return s.p.PID() }

// Stop sends SIGTERM to the server's PID (SIGKILL after 10 s) and removes
// its data directory.
func (s *Server) Stop() error {
	err := s.p.Stop(10 * time.Second)
	os.RemoveAll(s.dataDir)
	return err
}

// Log is what the server wrote to stderr.
func (s *Server) Log() string { return s.p.Stderr() }

// Metrics fetches /metrics and sums each metric over its labels.
func (s *Server) Metrics(ctx context.Context) (map[string]float64, error) {
	return FetchMetrics(ctx, "http://"+s.OpsAddr+"/metrics")
}

// FetchMetrics reads a Prometheus text page and sums each metric over its
// labels (histogram series keep their _bucket/_sum/_count suffix).
func FetchMetrics(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch %s: status %s", url, resp.Status)
	}
	m := make(map[string]float64)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		name := line[:sp]
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		m[name] += v
	}
	return m, sc.Err()
}

// Usage is the server process's resident memory and CPU time so far.
type Usage struct {
	RSS int64         // bytes, VmRSS of /proc/PID/status
	CPU time.Duration // see ProcessCPU
}

// ReadUsage reads pid's memory from /proc, and its CPU time as ProcessCPU
// does.
func ReadUsage(pid int) (Usage, error) {
	u, err := readProc(pid)
	if err != nil {
		return u, err
	}
	if d, err := processCPU(pid); err == nil {
		u.CPU = d
	}
	return u, nil
}

// ProcessCPU is the CPU time of process pid so far: from its CPU clock, to
// the nanosecond, where the kernel allows; else from /proc (10 ms ticks).
func ProcessCPU(pid int) (time.Duration, error) {
	if d, err := processCPU(pid); err == nil {
		return d, nil
	}
	u, err := readProc(pid)
	return u.CPU, err
}

// readProc reads /proc for pid: VmRSS, and utime+stime in 10 ms ticks.
func readProc(pid int) (Usage, error) {
	var u Usage
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				u.RSS = kb << 10
			}
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The command name may hold spaces; fields resume after its ')'.
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return u, fmt.Errorf("/proc/%d/stat: %d fields after the name, want at least 13", pid, len(f))
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	// USER_HZ is 100 on every Linux the Go runtime supports.
	u.CPU = time.Duration(utime+stime) * 10 * time.Millisecond
	return u, nil
}
