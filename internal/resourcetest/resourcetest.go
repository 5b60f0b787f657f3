// Package resourcetest starts the resources that the fencing kits guard,
// PostgreSQL and Redis from Debian's packages, for one test each: in a
// temporary directory, on a free loopback port, stopped by their PIDs when
// the test ends. A missing server skips the test with a line naming its
// package, except in CI (CI=true), where it fails it: .ci/fence.sh
// installs both.
package resourcetest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// missing skips or fails t for a server that is not installed.
func missing(t testing.TB, what, pkg string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed in CI: .ci/fence.sh must apt-get install %s (%v)", what, pkg, err)
	}
	t.Skipf("SKIPPED: %s is not installed (apt-get install %s): %v", what, pkg, err)
}

// freePort is a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// process is a server started for a test.
type process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// start starts cmd with its output in logFile, and stops it with sig (by
// its PID) when t ends, then with SIGKILL if it has not exited in 10s.
func start(t testing.TB, cmd *exec.Cmd, logFile string, sig syscall.Signal) *process {
	t.Helper()
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	p := &process{cmd: cmd, log: logFile, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(sig)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitReady waits until ready reports true, failing t with the server's
// log if the process exits or 30s pass first.
func (p *process) waitReady(t testing.TB, what string, ready func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ready(); {
		select {
		case <-p.done:
			b, _ := os.ReadFile(p.log)
			t.Fatalf("%s exited at start: %s", what, b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(p.log)
			t.Fatalf("%s not ready within 30s: %s", what, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Postgres is a PostgreSQL server of one test. Its superuser is User,
// who logs in without a password over TCP on 127.0.0.1.
type Postgres struct {
	Host, Port, User, Database string
}

// DSN is the server's URL for pgx, lib/pq or node-postgres.
func (p *Postgres) DSN() string {
	return fmt.Sprintf("postgres://%s@%s:%s/%s?sslmode=disable", p.User, p.Host, p.Port, p.Database)
}

// Addr is host:port.
func (p *Postgres) Addr() string { return net.JoinHostPort(p.Host, p.Port) }

// pgBin finds a PostgreSQL program: on PATH, or in Debian's versioned
// folder (the newest), which is not on PATH.
func pgBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(dirs) == 0 {
		return "", fmt.Errorf("no %s on PATH or in /usr/lib/postgresql/*/bin", name)
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	return dirs[0], nil
}

func version(binPath string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(binPath))))
	return v
}

// StartPostgres starts a fresh PostgreSQL server. PostgreSQL refuses to
// run as root: as root, it runs as the user postgres (Debian's package
// makes it), else nobody.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	initdb, err := pgBin("initdb")
	if err != nil {
		missing(t, "PostgreSQL", "postgresql", err)
	}
	postgres, err := pgBin("postgres")
	if err != nil {
		missing(t, "PostgreSQL", "postgresql", err)
	}
	// Not t.TempDir: its parents are private to root, and the server's
	// user must reach its data directory.
	dir, err := os.MkdirTemp("", "baton-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cred := dropRoot(t, dir)
	data := filepath.Join(dir, "data")
	run := func(cmd *exec.Cmd) {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
		}
	}
	run(exec.Command(initdb, "-D", data, "-U", "baton", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"))
	port := strconv.Itoa(freePort(t))
	cmd := exec.Command(postgres, "-D", data, "-p", port, "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	// SIGINT is PostgreSQL's fast shutdown: open transactions roll back.
	p := start(t, cmd, filepath.Join(dir, "postgres.log"), syscall.SIGINT)
	p.waitReady(t, "postgres", func() bool {
		b, _ := os.ReadFile(p.log)
		return strings.Contains(string(b), "ready to accept connections")
	})
	return &Postgres{Host: "127.0.0.1", Port: port, User: "baton", Database: "postgres"}
}

// dropRoot makes dir the server's when this process is root, and
// returns the credential to run the server with (nil: as this process).
func dropRoot(t testing.TB, dir string) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		u, err = user.Lookup("nobody")
	}
	if err != nil {
		t.Fatalf("running as root, and neither user postgres nor nobody exists to run PostgreSQL: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// Redis is a Redis server of one test, with no password.
type Redis struct {
	Addr string // host:port
}

// StartRedis starts a fresh Redis server that keeps nothing on disk.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		missing(t, "Redis", "redis-server", err)
	}
	dir := t.TempDir()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--loglevel", "warning")
	p := start(t, cmd, filepath.Join(dir, "redis.log"), syscall.SIGTERM)
	p.waitReady(t, "redis-server", func() bool { return ping(addr) })
	return &Redis{Addr: addr}
}

// ping reports whether a Redis server answers PING at addr.
func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "+PONG\r\n"
}
