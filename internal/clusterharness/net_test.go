package clusterharness

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/batonlock/baton/internal/faultproxy"
)

// The network of a run. With namespaces (root and iproute2), node i lives
// in namespace <tag>n<i> with two veth links: raft0 (10.A.1.i) on one
// bridge and cli0 (10.A.2.i) on another; the test process, in the root
// namespace, has 10.A.2.254 on the client bridge only, so it reaches every
// node's client and ops ports but no Raft port, and cutting the host end of
// a node's Raft veth partitions its Raft traffic while its clients still
// reach it.
//
// Without namespaces, node i listens on 127.A.i.1, and every node reaches
// every other's Raft port through a fault proxy of its own (one per
// ordered pair, in the test process): node i's -peers names itself at its
// Raft address and each other node j at the proxy i→j. Cutting node i's
// Raft link stalls every proxy to and from it (bytes held, as on a link
// that is down); its clients still reach it directly. Each node then
// bootstraps with a list of its own (the same ids, other addresses), which
// Raft accepts as one configuration: no membership change or snapshot
// install happens in these runs to spread one node's addresses to another.

// netPrefix starts every namespace, bridge and veth name the harness
// creates, so that leftovers of a killed run can be found and removed.
const netPrefix = "bch"

// Ports, the same on every node (each has addresses of its own).
const (
	raftPort   = 7301
	clientPort = 7101
	opsPort    = 7201
)

type network struct {
	netns bool
	tag   string // netPrefix + pid + a sequence letter: at most 11 bytes, for 15-byte link names
	octet int    // the A of the addresses
	n     int
	// proxies[i][j] carries node i's Raft traffic to node j (1-based;
	// loopback only).
	proxies [][]*faultproxy.Proxy
}

var netSeq atomic.Int32

// netnsReason is why namespaces cannot be used here ("" if they can).
func netnsReason() string {
	if os.Geteuid() != 0 {
		return "not root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "no ip command (iproute2)"
	}
	if os.Getenv("BATON_CLUSTER_NETNS") == "0" {
		return "BATON_CLUSTER_NETNS=0"
	}
	return ""
}

// newNetwork sets up the network of a run for n nodes; t.Cleanup removes it.
func newNetwork(t *testing.T, n int) *network {
	t.Helper()
	seq := netSeq.Add(1)
	pid := os.Getpid()
	nw := &network{
		tag:   netPrefix + strconv.Itoa(pid) + string(rune('a'+seq%26)),
		octet: 100 + (pid+int(seq))%100,
		n:     n,
	}
	if why := netnsReason(); why != "" {
		nw.startProxies(t)
		t.Logf("NETWORK: loopback (%s): no network namespaces; nodes on 127.%d.i.1, Raft through a fault proxy per pair of nodes (a cut link is a stall of its proxies)", why, nw.octet)
		return nw
	}
	removeStale(t)
	nw.netns = true
	t.Cleanup(func() { nw.remove(t) })
	for _, br := range []string{nw.tag + "R", nw.tag + "C"} {
		ipCmd(t, "link", "add", br, "type", "bridge")
		ipCmd(t, "link", "set", br, "up")
	}
	ipCmd(t, "addr", "add", fmt.Sprintf("10.%d.2.254/24", nw.octet), "dev", nw.tag+"C")
	for i := 1; i <= n; i++ {
		ns := nw.ns(i)
		ipCmd(t, "netns", "add", ns)
		ipCmd(t, "-n", ns, "link", "set", "lo", "up")
		for _, l := range []struct {
			host, inner, bridge string
			sub                 int
		}{
			{nw.raftLink(i), "raft0", nw.tag + "R", 1},
			{fmt.Sprintf("%sc%d", nw.tag, i), "cli0", nw.tag + "C", 2},
		} {
			ipCmd(t, "link", "add", l.host, "type", "veth", "peer", "name", l.inner, "netns", ns)
			ipCmd(t, "link", "set", l.host, "master", l.bridge)
			ipCmd(t, "link", "set", l.host, "up")
			ipCmd(t, "-n", ns, "addr", "add", fmt.Sprintf("10.%d.%d.%d/24", nw.octet, l.sub, i), "dev", l.inner)
			ipCmd(t, "-n", ns, "link", "set", l.inner, "up")
		}
	}
	t.Logf("NETWORK: namespaces %s: Raft on 10.%d.1.0/24, clients on 10.%d.2.0/24 (test process at 10.%d.2.254)",
		nw.tag+"n1..", nw.octet, nw.octet, nw.octet)
	return nw
}

func (nw *network) ns(i int) string       { return fmt.Sprintf("%sn%d", nw.tag, i) }
func (nw *network) raftLink(i int) string { return fmt.Sprintf("%sr%d", nw.tag, i) }

func (nw *network) raftAddr(i int) string {
	if nw.netns {
		return fmt.Sprintf("10.%d.1.%d:%d", nw.octet, i, raftPort)
	}
	return fmt.Sprintf("127.%d.%d.1:%d", nw.octet, i, raftPort)
}

func (nw *network) host(i int) string {
	if nw.netns {
		return fmt.Sprintf("10.%d.2.%d", nw.octet, i)
	}
	return fmt.Sprintf("127.%d.%d.1", nw.octet, i)
}

func (nw *network) clientAddr(i int) string { return fmt.Sprintf("%s:%d", nw.host(i), clientPort) }
func (nw *network) opsAddr(i int) string    { return fmt.Sprintf("%s:%d", nw.host(i), opsPort) }

// startProxies starts the Raft proxies of the loopback network.
func (nw *network) startProxies(t *testing.T) {
	nw.proxies = make([][]*faultproxy.Proxy, nw.n+1)
	for i := 1; i <= nw.n; i++ {
		nw.proxies[i] = make([]*faultproxy.Proxy, nw.n+1)
		for j := 1; j <= nw.n; j++ {
			if i == j {
				continue
			}
			p, err := faultproxy.New(nw.raftAddr(j))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			nw.proxies[i][j] = p
		}
	}
}

// peers is founder i's -peers: the founders, slots 1 to n, each at the
// address node i reaches it by.
func (nw *network) peers(i, n int) string {
	var p []string
	for j := 1; j <= n; j++ {
		addr := nw.raftAddr(j)
		if nw.proxies != nil && i != j {
			addr = nw.proxies[i][j].Addr()
		}
		p = append(p, fmt.Sprintf("n%d=%s", j, addr))
	}
	return strings.Join(p, ",")
}

// command is argv run in node i's namespace (ip netns exec execs it, so
// the process is argv[0] itself: its pid is the one to signal).
func (nw *network) command(i int, argv ...string) *exec.Cmd {
	if nw.netns {
		argv = append([]string{"ip", "netns", "exec", nw.ns(i)}, argv...)
	}
	return exec.Command(argv[0], argv[1:]...)
}

// setRaftLink brings node i's Raft link down or up; its client link stays.
func (nw *network) setRaftLink(t *testing.T, i int, up bool) {
	t.Helper()
	if nw.proxies == nil {
		state := "down"
		if up {
			state = "up"
		}
		ipCmd(t, "link", "set", nw.raftLink(i), state)
		return
	}
	for j := 1; j <= nw.n; j++ {
		if j == i {
			continue
		}
		for _, p := range []*faultproxy.Proxy{nw.proxies[i][j], nw.proxies[j][i]} {
			if up {
				p.Resume(faultproxy.Both)
			} else {
				p.Stall(faultproxy.Both)
			}
		}
	}
}

func (nw *network) remove(t *testing.T) {
	for _, o := range listNamed() {
		if strings.HasPrefix(o.name, nw.tag) {
			o.del(t)
		}
	}
}

// removeStale deletes what runs that no longer exist left behind: their
// names carry their pid.
func removeStale(t *testing.T) {
	for _, o := range listNamed() {
		rest := strings.TrimPrefix(o.name, netPrefix)
		digits := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
		pid, err := strconv.Atoi(rest[:digits])
		if err != nil || pid <= 0 {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			t.Logf("removing %s %s, left by process %d that no longer runs", o.kind, o.name, pid)
			o.del(t)
		}
	}
}

// named is a namespace or a root-namespace link of the harness.
type named struct{ kind, name string }

// del removes it; a veth goes with its peer, and a namespace with the
// links inside it.
func (o named) del(t *testing.T) {
	var out []byte
	var err error
	if o.kind == "netns" {
		out, err = exec.Command("ip", "netns", "del", o.name).CombinedOutput()
	} else {
		out, err = exec.Command("ip", "link", "del", o.name).CombinedOutput()
	}
	if err != nil && !strings.Contains(string(out), "Cannot find") && !strings.Contains(string(out), "No such") {
		t.Logf("remove %s %s: %v: %s", o.kind, o.name, err, out)
	}
}

// listNamed lists the harness's namespaces and root-namespace links.
func listNamed() []named {
	var all []named
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], netPrefix) {
				all = append(all, named{"netns", f[0]})
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if strings.HasPrefix(name, netPrefix) {
				all = append(all, named{"link", name})
			}
		}
	}
	return all
}

// ipCmd runs ip with args and fails the test if it fails.
func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}
