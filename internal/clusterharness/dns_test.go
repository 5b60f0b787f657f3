package clusterharness

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/proctest"
)

// Nodes named by DNS: a 3-node cluster whose nodes know each other, and
// whose clients know them, only by name (n1.baton.test, ...), each name
// resolved through the hosts file of the resolver's own network namespace
// (ip netns exec bind-mounts /etc/netns/<ns>/hosts over /etc/hosts). Every
// node listens on 0.0.0.0 and advertises its name (-raft-advertise,
// -advertise-addr, -advertise-ops-addr). Under a client load, each node
// in turn restarts at a new IP under its name (SIGTERM, a new address, the
// name moved in every hosts file, the same data directory), then all of
// them at once (SIGKILL); the cluster must come back each time with every
// node following the leader and reachable from it, grants must go on, and
// the checker must find nothing (tokens still rise across the full crash:
// nothing replicated was lost).
//
// The control runs the same test on the faultinject build with
// BATON_TEST_RESOLVE_ONCE=1, which keeps each member's address as the IP
// its name had when it entered the membership: the test must fail.
//
// The test process itself runs in a namespace of its own (the clients'),
// so that its resolver reads that namespace's hosts file: the outer run
// makes the network and runs the test binary again inside it.

const (
	dnsDomain = "baton.test"
	// dnsTagVar carries the network's tag and first octet to the inner run.
	dnsTagVar = "BATON_TEST_DNS_NET"
	// dnsCatchUp bounds a restarted node's return: started, following the
	// leader, reachable from it and caught up.
	dnsCatchUp = 30 * time.Second
	// dnsMaxGap bounds the longest time without a grant while the nodes
	// restart one at a time: a planned handover at most, with room for a
	// loaded machine.
	dnsMaxGap = 20 * time.Second
)

// dnsNet is the network: namespace <tag>s holds a bridge; node i lives in
// <tag>n<i> with eth0 at 10.A.G.i/16, where G rises with every move; the
// clients' namespace <tag>c has 10.A.0.254/16. Nothing is added to the
// root namespace but the namespaces' names.
type dnsNet struct {
	tag   string
	octet int
	n     int
	mu    sync.Mutex
	gen   []int // gen[i]: node i's current G (index 0 unused)
}

func (dn *dnsNet) ns(i int) string {
	if i == 0 {
		return dn.tag + "c"
	}
	return fmt.Sprintf("%sn%d", dn.tag, i)
}

func (dn *dnsNet) name(i int) string { return fmt.Sprintf("n%d.%s", i, dnsDomain) }

func (dn *dnsNet) ip(i int) string {
	dn.mu.Lock()
	defer dn.mu.Unlock()
	return fmt.Sprintf("10.%d.%d.%d", dn.octet, dn.gen[i], i)
}

// TestNodesRenamedByDNS: see the top of this file.
func TestNodesRenamedByDNS(t *testing.T) {
	needFaults(t)
	if v := os.Getenv(dnsTagVar); v != "" {
		dnsInner(t, v)
		return
	}
	if why := netnsReason(); why != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("nodes named by DNS are tested in network namespaces, and here %s (CI=%s)", why, os.Getenv("CI"))
		}
		t.Skipf("SKIPPED: nodes named by DNS are tested in network namespaces, and here %s", why)
	}
	removeStale(t)
	pid := os.Getpid()
	dn := &dnsNet{tag: netPrefix + strconv.Itoa(pid) + "d", octet: 200 + pid%50, n: 3, gen: make([]int, 4)}
	t.Cleanup(func() {
		for _, o := range listNamed() {
			if strings.HasPrefix(o.name, dn.tag) {
				o.del(t)
			}
		}
		for i := 0; i <= dn.n; i++ {
			os.RemoveAll(filepath.Join("/etc/netns", dn.ns(i)))
		}
	})
	sw := dn.tag + "s"
	ipCmd(t, "netns", "add", sw)
	ipCmd(t, "-n", sw, "link", "add", "br0", "type", "bridge")
	ipCmd(t, "-n", sw, "link", "set", "br0", "up")
	for i := 0; i <= dn.n; i++ {
		ns, host := dn.ns(i), fmt.Sprintf("%sh%d", dn.tag, i)
		ipCmd(t, "netns", "add", ns)
		ipCmd(t, "-n", ns, "link", "set", "lo", "up")
		ipCmd(t, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns)
		ipCmd(t, "link", "set", host, "netns", sw)
		ipCmd(t, "-n", sw, "link", "set", host, "master", "br0")
		ipCmd(t, "-n", sw, "link", "set", host, "up")
		ipCmd(t, "-n", ns, "link", "set", "eth0", "up")
		if err := os.MkdirAll(filepath.Join("/etc/netns", ns), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ipCmd(t, "-n", dn.ns(0), "addr", "add", fmt.Sprintf("10.%d.0.254/16", dn.octet), "dev", "eth0")
	for i := 1; i <= dn.n; i++ {
		dn.gen[i] = 1
		ipCmd(t, "-n", dn.ns(i), "addr", "add", dn.ip(i)+"/16", "dev", "eth0")
	}
	if err := dn.writeHosts(); err != nil {
		t.Fatal(err)
	}
	t.Logf("NETWORK: namespaces %s{c,n1..n%d} on one bridge (in %s), 10.%d.0.0/16; the names in /etc/netns/<ns>/hosts", dn.tag, dn.n, sw, dn.octet)

	cmd := exec.Command("ip", "netns", "exec", dn.ns(0), os.Args[0], "-test.run=^TestNodesRenamedByDNS$", "-test.v", "-test.count=1", "-test.timeout=30m")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d", dnsTagVar, dn.tag, dn.octet),
		harnessBinVar+"="+batonBin, harnessFaultBinVar+"="+faultBin)
	var out proctest.LogBuffer
	line := func(l string) { out.Add(l); t.Log(l) }
	p := proctest.Start(t, cmd, line, line)
	<-p.Exited
	p.Readers.Wait()
	if p.Code != 0 || !strings.Contains(out.String(), "--- PASS: TestNodesRenamedByDNS") {
		t.Fatalf("the test in namespace %s failed (exit %d)", dn.ns(0), p.Code)
	}
}

// writeHosts writes every namespace's hosts file with every node's name at
// its current address. The files are rewritten in place: a running
// process sees the file bind-mounted at its start, so a new inode would
// never reach it.
func (dn *dnsNet) writeHosts() error {
	var b strings.Builder
	b.WriteString("127.0.0.1 localhost\n")
	for i := 1; i <= dn.n; i++ {
		fmt.Fprintf(&b, "%s %s\n", dn.ip(i), dn.name(i))
	}
	for i := 0; i <= dn.n; i++ {
		f, err := os.OpenFile(filepath.Join("/etc/netns", dn.ns(i), "hosts"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		_, err = f.WriteString(b.String())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// move gives node i a new address and moves its name there.
func (dn *dnsNet) move(t *testing.T, i int) {
	t.Helper()
	old := dn.ip(i)
	dn.mu.Lock()
	dn.gen[i] = slices.Max(dn.gen) + 1
	dn.mu.Unlock()
	ipCmd(t, "-n", dn.ns(i), "addr", "del", old+"/16", "dev", "eth0")
	ipCmd(t, "-n", dn.ns(i), "addr", "add", dn.ip(i)+"/16", "dev", "eth0")
	if err := dn.writeHosts(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s -> %s", dn.name(i), old, dn.ip(i))
}

// dnsInner is the test inside the clients' namespace: the names, on the
// normal build, then the control.
func dnsInner(t *testing.T, v string) {
	tag, octet, _ := strings.Cut(v, ",")
	dn := &dnsNet{tag: tag, n: 3, gen: make([]int, 4)}
	dn.octet, _ = strconv.Atoi(octet)
	for i := 1; i <= dn.n; i++ {
		dn.gen[i] = 1
	}
	t.Run("names", func(t *testing.T) {
		v, err := dn.run(t, batonBin, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !v.ok() {
			t.Fatalf("the checker found %d violations in %d grants: %q", len(v.violations()), v.holds, v.violations())
		}
	})
	t.Run("control: names resolved once", func(t *testing.T) {
		v, err := dn.run(t, faultBin, []string{"BATON_TEST_RESOLVE_ONCE=1"})
		if err == nil && v.ok() {
			t.Fatalf("with each member's name resolved once, the cluster kept serving through new addresses (%d grants, no violation): the test does not see names resolved once", v.holds)
		}
		if err == nil {
			err = fmt.Errorf("the checker: %q", v.violations())
		}
		t.Logf("CONTROL (BATON_TEST_RESOLVE_ONCE=1): the test fails, as it must: %v", err)
	})
}

// dnsNode is one node's process and log.
type dnsNode struct {
	i   int
	dir string
	p   *proctest.Proc
	log *proctest.LogBuffer
	up  bool
}

// dnsCluster is one run's nodes.
type dnsCluster struct {
	t     *testing.T
	dn    *dnsNet
	bin   string
	env   []string
	nodes []*dnsNode
	token string
	tfile string
}

// run is one run of the scenario with bin and env; the error is the first
// step that failed (the control's expected failure among them), the
// verdict the checker's over every grant until then.
func (dn *dnsNet) run(t *testing.T, bin string, env []string) (verdict, error) {
	c := &dnsCluster{t: t, dn: dn, bin: bin, env: env, token: fmt.Sprintf("dns-token-%032d", time.Now().UnixNano())}
	c.tfile = filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(c.tfile, []byte(c.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= dn.n; i++ {
		c.nodes = append(c.nodes, &dnsNode{i: i, dir: filepath.Join(t.TempDir(), fmt.Sprintf("n%d", i)), log: &proctest.LogBuffer{}})
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, nd := range c.nodes {
				t.Logf("=== node n%d log (last lines):\n%s", nd.i, tail(nd.log.String(), 60))
			}
		}
	})
	for _, nd := range c.nodes {
		c.start(nd)
	}
	for _, nd := range c.nodes {
		if err := c.serving(nd); err != nil {
			return verdict{}, err
		}
	}
	if err := c.settled("the first start"); err != nil {
		return verdict{}, err
	}
	w := newWorkload()
	var addrs []string
	for i := 1; i <= dn.n; i++ {
		addrs = append(addrs, fmt.Sprintf("%s:%d", dn.name(i), clientPort))
	}
	w.loops(t, 6, 1, addrs, []string{"dns/a", "dns/b", "dns/c"})
	finish := func(err error) (verdict, error) {
		v := check(w.stop())
		t.Logf("%d grants; acquire errors:%s", v.holds, w.errorSummary())
		for _, nd := range c.nodes {
			if nd.up {
				nd.p.Signal(t, syscall.SIGKILL)
				<-nd.p.Exited
				nd.up = false
			}
		}
		return v, err
	}
	if err := c.grantsAfter(w, time.Now(), "the first start"); err != nil {
		return finish(err)
	}

	// One at a time: SIGTERM (a planned handover when it leads), a new
	// address, the same name and data directory.
	phase := time.Now()
	for _, nd := range c.nodes {
		if err := c.stop(nd, syscall.SIGTERM); err != nil {
			return finish(err)
		}
		dn.move(t, nd.i)
		c.start(nd)
		if err := c.serving(nd); err != nil {
			return finish(err)
		}
		what := fmt.Sprintf("n%d came back at %s under %s", nd.i, dn.ip(nd.i), dn.name(nd.i))
		if err := c.settled(what); err != nil {
			return finish(err)
		}
		if err := c.grantsAfter(w, time.Now(), what); err != nil {
			return finish(err)
		}
	}
	gap, at := longestGap(w, phase, time.Now())
	t.Logf("one at a time: the longest time without a grant was %v (from %s)", gap.Round(time.Millisecond), at.Format("15:04:05.000"))
	if gap > dnsMaxGap {
		return finish(fmt.Errorf("while the nodes restarted one at a time, no grant for %v (from %s): quorum was lost", gap, at.Format("15:04:05.000")))
	}

	// All at once: every node killed, every address new.
	for _, nd := range c.nodes {
		if err := c.stop(nd, syscall.SIGKILL); err != nil {
			return finish(err)
		}
	}
	for i := 1; i <= dn.n; i++ {
		dn.move(t, i)
	}
	for _, nd := range c.nodes {
		c.start(nd)
	}
	for _, nd := range c.nodes {
		if err := c.serving(nd); err != nil {
			return finish(err)
		}
	}
	if err := c.settled("every node came back at a new address at once"); err != nil {
		return finish(err)
	}
	if err := c.grantsAfter(w, time.Now(), "every node came back at a new address at once"); err != nil {
		return finish(err)
	}
	// The membership still names every member by its name.
	l := c.leader()
	var view struct {
		Members []struct {
			ID       string `json:"id"`
			RaftAddr string `json:"raft_addr"`
		} `json:"members"`
	}
	if err := c.get(l, "/v1/cluster", &view); err != nil {
		return finish(err)
	}
	for _, m := range view.Members {
		if want := fmt.Sprintf("%s.%s:%d", m.ID, dnsDomain, raftPort); m.RaftAddr != want {
			return finish(fmt.Errorf("member %s is at %q in the membership, want its name %q", m.ID, m.RaftAddr, want))
		}
	}
	return finish(nil)
}

// start starts nd's process in its namespace.
func (c *dnsCluster) start(nd *dnsNode) {
	c.t.Helper()
	name := c.dn.name(nd.i)
	var peers []string
	for i := 1; i <= c.dn.n; i++ {
		peers = append(peers, fmt.Sprintf("n%d=%s:%d", i, c.dn.name(i), raftPort))
	}
	cmd := exec.Command("ip", "netns", "exec", c.dn.ns(nd.i), c.bin, "serve",
		"-node-id", fmt.Sprintf("n%d", nd.i), "-peers", strings.Join(peers, ","),
		"-raft-addr", fmt.Sprintf("0.0.0.0:%d", raftPort), "-raft-advertise", fmt.Sprintf("%s:%d", name, raftPort),
		"-addr", fmt.Sprintf("0.0.0.0:%d", clientPort), "-advertise-addr", fmt.Sprintf("%s:%d", name, clientPort),
		"-ops-addr", fmt.Sprintf("0.0.0.0:%d", opsPort), "-advertise-ops-addr", fmt.Sprintf("%s:%d", name, opsPort),
		"-data-dir", nd.dir, "-shutdown-linger", "0s", "-log-format", "json", "-admin-token-file", c.tfile)
	cmd.Env = append(cmd.Environ(), c.env...)
	nd.log.Add(fmt.Sprintf("--- start %s at %s", time.Now().Format("15:04:05.000"), c.dn.ip(nd.i)))
	nd.p = proctest.Start(c.t, cmd, nd.log.Add, nd.log.Add)
	nd.up = true
}

// serving waits for nd's "baton serving" line.
func (c *dnsCluster) serving(nd *dnsNode) error {
	deadline := time.Now().Add(startWait)
	for !strings.Contains(nd.log.String()[strings.LastIndex(nd.log.String(), "--- start"):], `"msg":"baton serving"`) {
		select {
		case <-nd.p.Exited:
			return fmt.Errorf("node n%d exited with %d before serving", nd.i, nd.p.Code)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node n%d did not serve within %v", nd.i, startWait)
		}
	}
	return nil
}

// stop ends nd with sig and waits for its end.
func (c *dnsCluster) stop(nd *dnsNode, sig syscall.Signal) error {
	nd.p.Signal(c.t, sig)
	select {
	case <-nd.p.Exited:
	case <-time.After(termWait):
		return fmt.Errorf("node n%d still running %v after %v", nd.i, termWait, sig)
	}
	nd.up = false
	if sig == syscall.SIGTERM && nd.p.Code != 0 {
		return fmt.Errorf("node n%d exited %d after SIGTERM, want 0", nd.i, nd.p.Code)
	}
	return nil
}

// dnsHTTP asks the nodes' ops ports by name; a dial to an address that
// has gone gives up with the request, so no dial outlives the test.
var dnsHTTP = &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true,
	DialContext: (&net.Dialer{Timeout: time.Second}).DialContext}}

// get reads path from node i's ops API, by name, into v.
func (c *dnsCluster) get(i int, path string, v any) error {
	req, err := http.NewRequest("GET", fmt.Sprintf("http://%s:%d%s", c.dn.name(i), opsPort, path), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := dnsHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s on n%d: %s", path, i, resp.Status)
	}
	if v == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// leader is the node whose /readyz answers 200, 0 if none.
func (c *dnsCluster) leader() int {
	for _, nd := range c.nodes {
		if nd.up && c.get(nd.i, "/readyz", nil) == nil {
			return nd.i
		}
	}
	return 0
}

// settled waits until one node serves as the leader, every node follows
// it, and the leader reaches every member, healthy: the cluster has all
// of its members back, not only a quorum.
func (c *dnsCluster) settled(after string) error {
	var last error
	for deadline := time.Now().Add(dnsCatchUp); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if last = c.settledNow(); last == nil {
			return nil
		}
	}
	return fmt.Errorf("after %s: not settled within %v: %v", after, dnsCatchUp, last)
}

func (c *dnsCluster) settledNow() error {
	l := c.leader()
	if l == 0 {
		return errors.New("no serving leader")
	}
	leaderID := fmt.Sprintf("n%d", l)
	// Every node knows the leader, and hands out its names (the client
	// address NOT_LEADER names, and the ops address) as advertised.
	want := fmt.Sprintf("%s:%d %s:%d", c.dn.name(l), clientPort, c.dn.name(l), opsPort)
	for _, nd := range c.nodes {
		var v struct {
			Leader *struct {
				ID      string `json:"id"`
				Addr    string `json:"addr"`
				OpsAddr string `json:"ops_addr"`
			} `json:"leader"`
		}
		if err := c.get(nd.i, "/v1/cluster", &v); err != nil {
			return err
		}
		if v.Leader == nil || v.Leader.ID != leaderID {
			return fmt.Errorf("n%d does not follow the leader n%d", nd.i, l)
		}
		if got := v.Leader.Addr + " " + v.Leader.OpsAddr; got != want {
			return fmt.Errorf("n%d hands out the leader at %q, want its names %q", nd.i, got, want)
		}
		// A container platform's readiness: a member following the leader.
		if err := c.get(nd.i, "/readyz?member", nil); err != nil {
			return err
		}
	}
	var lv struct {
		Members []struct {
			ID     string `json:"id"`
			Health *struct {
				Reachable bool `json:"reachable"`
				Healthy   bool `json:"healthy"`
			} `json:"health"`
		} `json:"members"`
	}
	if err := c.get(l, "/v1/cluster", &lv); err != nil {
		return err
	}
	for _, m := range lv.Members {
		if m.ID == leaderID {
			continue
		}
		if m.Health == nil || !m.Health.Reachable || !m.Health.Healthy {
			return fmt.Errorf("the leader n%d does not reach member %s, healthy", l, m.ID)
		}
	}
	return nil
}

// grantsAfter waits for a grant after t0.
func (c *dnsCluster) grantsAfter(w *workload, t0 time.Time, after string) error {
	deadline := time.Now().Add(leaderWait)
	for w.firstGrant(t0, 0) == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: no grant within %v; acquire errors:%s", after, leaderWait, w.errorSummary())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// longestGap is the longest time between from and to without a grant,
// and where it began.
func longestGap(w *workload, from, to time.Time) (time.Duration, time.Time) {
	w.mu.Lock()
	var at []time.Time
	for _, h := range w.holds {
		if !h.granted.Before(from) && !h.granted.After(to) {
			at = append(at, h.granted)
		}
	}
	w.mu.Unlock()
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	at = append(append([]time.Time{from}, at...), to)
	var gap time.Duration
	var start time.Time
	for i := 1; i < len(at); i++ {
		if d := at[i].Sub(at[i-1]); d > gap {
			gap, start = d, at[i-1]
		}
	}
	return gap, start
}
