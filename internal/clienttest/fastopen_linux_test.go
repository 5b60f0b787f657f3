package clienttest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/testcerts"
	"github.com/batonlock/baton/server"
)

// netnsEnv names the network namespace that TestFastOpen runs its real
// part in: the test binary runs itself again there, under ip netns exec.
const netnsEnv = "BATON_TEST_NETNS"

// TestFastOpen: with -tcp-fastopen on the server and WithTCPFastOpen on the
// client, the ACQUIRE rides in the SYN (the kernel's TCPFastOpenPassive
// counter rises once per claim after the first, which fetches the cookie);
// with either side off, or the kernel's server bit clear, claims work with
// ordinary handshakes. The sysctl net.ipv4.tcp_fastopen is per network
// namespace, so the test makes one of its own and leaves the host's alone.
func TestFastOpen(t *testing.T) {
	if ns := os.Getenv(netnsEnv); ns != "" {
		fastOpenInNetns(t)
		return
	}
	if testing.Short() {
		t.Skip("creates a network namespace; skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: TCP Fast Open is tested in a network namespace of its own, which needs root")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("ip (iproute2) is not installed: the TCP Fast Open test cannot run (CI=%s)", os.Getenv("CI"))
		}
		t.Skip("SKIPPED: ip (iproute2) is not installed, so TCP Fast Open was not tested")
	}
	hostBefore := readSysctl(t, "/proc/sys/net/ipv4/tcp_fastopen")
	ns := fmt.Sprintf("baton-tfo-%d", os.Getpid())
	if out, err := exec.Command(ip, "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED: cannot create a network namespace (%v: %s), so TCP Fast Open was not tested", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command(ip, "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	})
	if out, err := exec.Command(ip, "netns", "exec", ns, ip, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up in %s: %v: %s", ns, err, out)
	}
	args := []string{"netns", "exec", ns, os.Args[0], "-test.run=^TestFastOpen$", "-test.v", "-test.count=1"}
	cmd := exec.Command(ip, args...)
	cmd.Env = append(os.Environ(), netnsEnv+"="+ns)
	out, err := cmd.CombinedOutput()
	t.Logf("in network namespace %s:\n%s", ns, out)
	if err != nil {
		t.Fatalf("the test in the namespace failed: %v", err)
	}
	if !bytes.Contains(out, []byte("--- PASS: TestFastOpen")) {
		t.Fatal("the test in the namespace did not pass")
	}
	if after := readSysctl(t, "/proc/sys/net/ipv4/tcp_fastopen"); after != hostBefore {
		t.Fatalf("the host's net.ipv4.tcp_fastopen changed from %d to %d: the sysctl is not per namespace here", hostBefore, after)
	}
}

// fastOpenInNetns is TestFastOpen inside its namespace.
func fastOpenInNetns(t *testing.T) {
	const sysctl = "/proc/sys/net/ipv4/tcp_fastopen"
	const claims, warmup = 5, 2
	// run starts a server and takes the lock warmup+claims times, one after
	// the other; it returns the change of the Fast Open counters over the
	// last claims, and the server's log. The first claims fetch the cookie
	// with an ordinary handshake (the kernel at times asks twice).
	ca := testcerts.NewCA(t, "ca")
	serverTLS := &tls.Config{Certificates: []tls.Certificate{ca.Server(t).TLS}}
	clientTLS := &tls.Config{RootCAs: ca.Pool()}
	run := func(t *testing.T, serverTFO, clientTFO bool, withTLS ...bool) (passive, active int64, log string) {
		var logBuf bytes.Buffer
		sw := &syncWriter{w: &logBuf}
		useTLS := len(withTLS) > 0 && withTLS[0]
		ts := batontest.StartServer(t, func(c *server.Config) {
			c.TCPFastOpen = serverTFO
			c.Logger = slog.New(slog.NewTextHandler(sw, nil))
			if useTLS {
				c.TLS = serverTLS
			}
		})
		opts := []baton.Option{baton.WithTCPFastOpen(clientTFO)}
		if useTLS {
			opts = append(opts, baton.WithTLSConfig(clientTLS))
		}
		c := newTestClient(t, []string{ts.Addr}, opts...)
		var before map[string]int64
		var last uint64
		for i := 0; i < warmup+claims; i++ {
			if i == warmup {
				before = tcpExt(t)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			l, err := c.Acquire(ctx, "tfo")
			cancel()
			if err != nil {
				t.Fatalf("claim %d: %v", i, err)
			}
			if l.Token() <= last {
				t.Fatalf("claim %d: token %d after %d", i, l.Token(), last)
			}
			last = l.Token()
			if err := l.Release(); err != nil {
				t.Fatalf("claim %d: Release: %v", i, err)
			}
		}
		after := tcpExt(t)
		ts.Stop(t)
		sw.mu.Lock()
		defer sw.mu.Unlock()
		return after["TCPFastOpenPassive"] - before["TCPFastOpenPassive"],
			after["TCPFastOpenActive"] - before["TCPFastOpenActive"], logBuf.String()
	}

	// This namespace's own sysctl; the host's is left alone (checked
	// outside). Bit 1: client, bit 2: server.
	writeSysctl(t, sysctl, 1)
	t.Run("kernel server bit clear", func(t *testing.T) {
		passive, active, log := run(t, true, true)
		if passive != 0 || active != 0 {
			t.Fatalf("TCPFastOpenPassive +%d, TCPFastOpenActive +%d with the server bit clear, want 0", passive, active)
		}
		if !strings.Contains(log, "set bit 2 of net.ipv4.tcp_fastopen") {
			t.Fatalf("the server did not warn that the kernel refuses Fast Open; its log:\n%s", log)
		}
	})
	writeSysctl(t, sysctl, 3)
	if v := readSysctl(t, sysctl); v != 3 {
		t.Fatalf("net.ipv4.tcp_fastopen is %d in the namespace after writing 3", v)
	}
	for _, tt := range []struct {
		name                 string
		serverTFO, clientTFO bool
		want                 int64 // claims whose ACQUIRE rode in the SYN
	}{
		{"both on", true, true, claims},
		{"off by default", false, false, 0},
		{"server only", true, false, 0},
		{"client only", false, true, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			passive, active, log := run(t, tt.serverTFO, tt.clientTFO)
			if passive != tt.want || active != tt.want {
				t.Fatalf("TCPFastOpenPassive +%d, TCPFastOpenActive +%d over %d claims after %d to fetch the cookie, want +%d each",
					passive, active, claims, warmup, tt.want)
			}
			if tt.serverTFO && !strings.Contains(log, "tcp-fastopen on") {
				t.Fatalf("the server did not log that Fast Open is on; its log:\n%s", log)
			}
		})
	}
	t.Run("over TLS: the ClientHello rides in the SYN", func(t *testing.T) {
		passive, active, _ := run(t, true, true, true)
		if passive != claims || active != claims {
			t.Fatalf("TCPFastOpenPassive +%d, TCPFastOpenActive +%d over %d claims over TLS, want +%d each", passive, active, claims, claims)
		}
	})
	// With Fast Open the connect returns before the server answers; the
	// dial still waits for the handshake, so a server that is down (whose
	// cookie the kernel holds) fails the dial and Acquire moves on.
	t.Run("a server that is down is passed over", func(t *testing.T) {
		a := batontest.StartServer(t, func(c *server.Config) { c.TCPFastOpen = true })
		b := batontest.StartServer(t, func(c *server.Config) { c.TCPFastOpen = true })
		// Connections are counted: the fallback from protocol version 3
		// to 2 of a server that does not speak it would add one.
		c := newTestClient(t, []string{a.Addr, b.Addr}, baton.WithTCPFastOpen(true), baton.WithResume(false))
		for i := 0; i < warmup; i++ {
			acquire(t, c, "tfo/down").Release()
		}
		a.Stop(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		before := tcpExt(t)
		l, err := c.Acquire(ctx, "tfo/down")
		if err != nil {
			t.Fatalf("Acquire with %s down and %s up: %v", a.Addr, b.Addr, err)
		}
		l.Release()
		// The kernel counts a Fast Open connect once its SYN-ACK is in: the
		// refused one does not count, the one to the other server does.
		if after := tcpExt(t); after["TCPFastOpenActive"]-before["TCPFastOpenActive"] != 1 {
			t.Fatalf("TCPFastOpenActive +%d, want 1: the claim on the server that is up rides in the SYN",
				after["TCPFastOpenActive"]-before["TCPFastOpenActive"])
		}
	})
}

// tcpExt reads the TcpExt counters of this network namespace.
func tcpExt(t *testing.T) map[string]int64 {
	t.Helper()
	f, err := os.Open("/proc/net/netstat")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var names []string
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != "TcpExt:" {
			continue
		}
		if names == nil {
			names = fields[1:]
			continue
		}
		m := make(map[string]int64, len(names))
		for i, v := range fields[1:] {
			if i < len(names) {
				m[names[i]], _ = strconv.ParseInt(v, 10, 64)
			}
		}
		return m
	}
	t.Fatal("no TcpExt counters in /proc/net/netstat")
	return nil
}

func readSysctl(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

func writeSysctl(t *testing.T, path string, v int) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strconv.Itoa(v)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// syncWriter serializes writes to w: the server logs from several
// goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
