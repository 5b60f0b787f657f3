package cli

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// clusterProc is one `baton serve` node of a test cluster.
type clusterProc struct {
	id, addr, opsAddr, raftAddr, dataDir string
	cmd                                  *exec.Cmd
	log                                  *loggedCmd
}

// freeAddrs reserves n loopback ports by binding and closing them.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// clusterLayout picks the addresses and data directories of three nodes,
// and returns them with their -peers list.
func clusterLayout(t *testing.T) ([]*clusterProc, string) {
	t.Helper()
	a := freeAddrs(t, 9)
	var procs []*clusterProc
	var peers []string
	for i := range 3 {
		p := &clusterProc{id: fmt.Sprintf("n%d", i+1), addr: a[3*i], opsAddr: a[3*i+1], raftAddr: a[3*i+2], dataDir: filepath.Join(t.TempDir(), "data")}
		procs = append(procs, p)
		peers = append(peers, p.id+"="+p.raftAddr)
	}
	return procs, strings.Join(peers, ",")
}

func newClusterProcs(t *testing.T) []*clusterProc {
	t.Helper()
	procs, peers := clusterLayout(t)
	for _, p := range procs {
		p.start(t, peers)
	}
	waitAllFollow(t, procs)
	return procs
}

// waitAllFollow waits until every node of procs runs Raft and has the log
// (it knows a leader and the epoch). A founder that started after the
// others founded the cluster joins a moment later, once the leader has
// vouched for it: a test that kills the leader before then would find two
// nodes alive and only one in the cluster, which cannot elect anyone.
func waitAllFollow(t *testing.T, procs []*clusterProc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // elections on a loaded 2-core machine
	for {
		var behind []string
		for _, p := range procs {
			v, err := getCluster(p.opsAddr)
			if err != nil || v.Leader == nil || v.Epoch == 0 {
				behind = append(behind, p.id)
			}
		}
		if len(behind) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes %v never followed a leader with the log", behind)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *clusterProc) start(t *testing.T, peers string) {
	t.Helper()
	p.cmd = batonCmd(t, "serve", "-node-id", p.id, "-raft-addr", p.raftAddr, "-peers", peers,
		"-addr", p.addr, "-ops-addr", p.opsAddr, "-data-dir", p.dataDir,
		"-shutdown-linger=0s", "-log-format=json")
	p.log = startLogged(t, p.cmd)
}

// rejoin starts p again with its data directory and Raft address, on new
// client and ops ports, and waits until it follows a leader. Loopback ports
// are shared with every test running beside this one, whose connections
// take free ports as their own: a port of p's, free since p died, may be
// taken when p starts again (the node then exits at once, "address already
// in use"), so p starts again until it binds.
func (p *clusterProc) rejoin(t *testing.T, peers string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // an election, and a log to catch up, on a loaded machine
	for attempt := 1; ; attempt++ {
		a := freeAddrs(t, 2)
		p.addr, p.opsAddr = a[0], a[1]
		p.start(t, peers)
		for {
			select {
			case err := <-p.log.waited:
				p.log.waited <- err // for the cleanup
				logged := p.log.drain(t)
				if strings.Contains(logged, "address already in use") && attempt < 10 {
					t.Logf("restart %d: a port was taken meanwhile; again: %s", attempt, logged)
					time.Sleep(500 * time.Millisecond)
				} else {
					t.Fatalf("restarted node exited: %v\n%s", err, logged)
				}
			default:
				v, err := getCluster(p.opsAddr)
				if err == nil && v.Role == "follower" && v.Leader != nil {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("restarted node did not rejoin within 30s: %+v %v\n%s", v, err, p.log.drain(t))
				}
				time.Sleep(50 * time.Millisecond)
				continue
			}
			break
		}
	}
}

type clusterJSONView struct {
	Role   string `json:"role"`
	Epoch  uint64 `json:"epoch"`
	Leader *struct {
		ID, Addr string
	} `json:"leader"`
	Members []struct{ ID string } `json:"members"`
}

func getCluster(opsAddr string) (clusterJSONView, error) {
	var v clusterJSONView
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + opsAddr + "/v1/cluster")
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

func readyz(opsAddr string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + opsAddr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitLeader waits for one of procs to be ready as leader.
func waitLeader(t *testing.T, procs []*clusterProc) *clusterProc {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // elections on a loaded 2-core machine
	for time.Now().Before(deadline) {
		for _, p := range procs {
			if p != nil && readyz(p.opsAddr) == http.StatusOK {
				return p
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no node became a ready leader")
	return nil
}

func acquiredToken(t *testing.T, p []byte) uint64 {
	t.Helper()
	if len(p) != 9 {
		t.Fatalf("ACQUIRED payload of %d bytes", len(p))
	}
	return binary.BigEndian.Uint64(p[1:])
}

// TestBinaryCluster: three real `baton serve` nodes on loopback elect a
// leader; a follower answers NOT_LEADER with the leader's address; after
// kill -9 of the leader a new one grants only after its grace, with a
// higher token; SIGTERM on a leader hands over (exit 0) and the next
// leader grants at once, with a higher token still.
func TestBinaryCluster(t *testing.T) {
	t.Parallel()
	procs := newClusterProcs(t)
	l := waitLeader(t, procs)
	var f *clusterProc
	for _, p := range procs {
		if p != l {
			f = p
			break
		}
	}
	// The follower's hint comes once it has applied the leader's epoch.
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", f.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 1000, Name: "jobs"})
		conn.Write(b)
		h, p := readFrame(t, conn)
		conn.Close()
		if h.Type != wire.TypeError || wire.Code(p[0]) != wire.CodeNotLeader {
			t.Fatalf("follower answered %v % x, want ERROR NOT_LEADER", h.Type, p)
		}
		if string(p[1:]) == l.addr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("follower's NOT_LEADER hint %q, want %q", p[1:], l.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}

	holder := readGranted(t, l.addr, "jobs", time.Second)
	first := holder.token

	// kill -9 of the leader: the holder's lease (1s) bounds the new grace.
	l.cmd.Process.Signal(syscall.SIGKILL)
	killed := time.Now()
	var rest []*clusterProc
	for _, p := range procs {
		if p != l {
			rest = append(rest, p)
		}
	}
	l2 := waitLeader(t, rest)
	g := readGranted(t, l2.addr, "jobs", 5*time.Second)
	after := time.Since(killed)
	t.Logf("kill -9 of the leader to the first grant on the new one: %v", after.Round(time.Millisecond))
	if after < time.Second+400*time.Millisecond {
		t.Fatalf("new leader granted %v after the kill, inside the grace (lease bound 1s + 2 x 200ms)", after)
	}
	if g.token <= first {
		t.Fatalf("token after failover %#x, want above %#x", g.token, first)
	}
	g.conn.Close()

	// Bring the killed node back with its data directory, then SIGTERM
	// the leader: a planned handover.
	var peers []string
	for _, p := range procs {
		peers = append(peers, p.id+"="+p.raftAddr)
	}
	l.rejoin(t, strings.Join(peers, ","))
	h := readGranted(t, l2.addr, "jobs", 30*time.Second) // a long lease: only a clean handover skips it
	closed := make(chan struct{})
	go func() { // the client closes on SHUTDOWN, as every client does
		defer close(closed)
		buf := make([]byte, 64)
		h.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		h.conn.Read(buf)
		h.conn.Close()
	}()
	stopped := time.Now()
	l2.cmd.Process.Signal(syscall.SIGTERM)
	<-closed
	if err := <-l2.log.waited; err != nil {
		t.Fatalf("leader after SIGTERM: %v, want exit 0", err)
	}
	l2.log.waited <- nil // for the cleanup
	var rest2 []*clusterProc
	for _, p := range procs {
		if p != l2 {
			rest2 = append(rest2, p)
		}
	}
	l3 := waitLeader(t, rest2)
	g3 := readGranted(t, l3.addr, "jobs", time.Second)
	t.Logf("SIGTERM of the leader to the first grant on the next: %v", time.Since(stopped).Round(time.Millisecond))
	if time.Since(stopped) > 10*time.Second {
		t.Fatalf("planned handover took %v: the 30s lease bound was waited", time.Since(stopped))
	}
	if g3.token <= g.token {
		t.Fatalf("token after handover %#x, want above %#x", g3.token, g.token)
	}
}

type granted struct {
	conn  net.Conn
	token uint64
}

// readGranted acquires name on addr and waits (heartbeating) for the grant.
func readGranted(t *testing.T, addr, name string, lease time.Duration) granted {
	t.Helper()
	return readGrantedClaim(t, addr, wire.Acquire{Version: wire.Version, LeaseMs: uint32(lease.Milliseconds()), Name: name})
}

// readGrantedClaim is readGranted for the claim a (a shared one, say).
func readGrantedClaim(t *testing.T, addr string, a wire.Acquire) granted {
	t.Helper()
	name, lease := a.Name, time.Duration(a.LeaseMs)*time.Millisecond
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	b, err := wire.AppendAcquire(nil, a)
	if err != nil {
		t.Fatal(err)
	}
	conn.Write(b)
	// Read with a deadline of a quarter lease and heartbeat when it passes,
	// so the push is seen the moment it comes (timing is measured on it).
	deadline := time.Now().Add(15 * time.Second)
	hdr := make([]byte, wire.HeaderSize)
	for time.Now().Before(deadline) {
		conn.SetReadDeadline(time.Now().Add(lease / 4))
		if _, err := io.ReadFull(conn, hdr); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				conn.Write(wire.AppendHeartbeat(nil))
				continue
			}
			t.Fatalf("ACQUIRE %q on %s: %v", name, addr, err)
		}
		h, err := wire.ParseHeader(hdr)
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, h.Length)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(conn, p); err != nil {
			t.Fatal(err)
		}
		switch h.Type {
		case wire.TypeAcquired:
			conn.SetReadDeadline(time.Time{})
			return granted{conn: conn, token: acquiredToken(t, p)}
		case wire.TypeWaiting:
		default:
			t.Fatalf("ACQUIRE %q on %s: got %v % x", name, addr, h.Type, p)
		}
	}
	t.Fatalf("ACQUIRE %q on %s: no grant", name, addr)
	return granted{}
}

// batonOut runs a baton command to its end and returns its exit code and
// output.
func batonOut(t *testing.T, args ...string) (int, string) {
	t.Helper()
	out, err := batonCmd(t, args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatalf("baton %v: %v", args, err)
	}
	return 0, string(out)
}

// TestBinaryClusterReplaceAndRestart: the documented procedure to replace
// a dead node, run against a follower (which sends it on to the leader),
// then kill -9 of every node and a restart: tokens still rise.
func TestBinaryClusterReplaceAndRestart(t *testing.T) {
	t.Parallel()
	procs := newClusterProcs(t)
	l := waitLeader(t, procs)
	g := readGranted(t, l.addr, "jobs", time.Second)
	first := g.token
	g.conn.Close()
	var dead, f *clusterProc
	for _, p := range procs {
		if p != l && dead == nil {
			dead = p
		} else if p != l {
			f = p
		}
	}
	dead.cmd.Process.Signal(syscall.SIGKILL)
	<-dead.log.waited
	dead.log.waited <- nil

	if code, out := batonCluster(t, "cluster", "remove", dead.id, "-ops-addr", f.opsAddr); code != 0 || !strings.Contains(out, "removed "+dead.id) {
		t.Fatalf("baton cluster remove via a follower: exit %d\n%s", code, out)
	}
	if code, out := batonCluster(t, "cluster", "remove", "nobody", "-ops-addr", l.opsAddr); code != exitNotFound {
		t.Fatalf("remove of an unknown member: exit %d, want %d\n%s", code, exitNotFound, out)
	}
	// The replacement: a new id, an empty data dir, -join.
	a := freeAddrs(t, 3)
	n4 := &clusterProc{id: "n4", addr: a[0], opsAddr: a[1], raftAddr: a[2], dataDir: filepath.Join(t.TempDir(), "data")}
	n4.cmd = batonCmd(t, "serve", "-node-id", "n4", "-raft-addr", n4.raftAddr, "-join",
		"-addr", n4.addr, "-ops-addr", n4.opsAddr, "-data-dir", n4.dataDir, "-shutdown-linger=0s", "-log-format=json")
	n4.log = startLogged(t, n4.cmd)
	if code, out := batonCluster(t, "cluster", "add", "n4", n4.raftAddr, "-ops-addr", f.opsAddr); code != 0 || !strings.Contains(out, "added n4") {
		t.Fatalf("baton cluster add via a follower: exit %d\n%s", code, out)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		v, err := getCluster(n4.opsAddr)
		if err == nil && v.Role == "follower" && len(v.Members) == 3 && v.Leader != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n4 did not join: %+v %v", v, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	code, out := batonOut(t, "cluster", "-ops-addr", n4.opsAddr)
	if code != 0 || !strings.Contains(out, "node n4: follower") || !strings.Contains(out, "n4  ") || strings.Contains(out, dead.id+"  ") {
		t.Fatalf("baton cluster on n4: exit %d\n%s", code, out)
	}
	// Lock state through a follower is the leader's. The membership change
	// may have moved leadership on a loaded machine: ask whoever leads now.
	g = readGranted(t, waitLeader(t, []*clusterProc{l, f, n4}).addr, "jobs", time.Second)
	if code, out := batonOut(t, "locks", "-ops-addr", n4.opsAddr); code != 0 || !strings.Contains(out, "jobs") {
		t.Fatalf("baton locks via a follower: exit %d\n%s", code, out)
	}
	second := g.token
	if second <= first {
		t.Fatalf("token %#x, want above %#x", second, first)
	}

	// kill -9 of every node, then a restart of all: tokens still rise.
	live := []*clusterProc{l, f, n4}
	for _, p := range live {
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.log.waited
		p.log.waited <- nil
	}
	for _, p := range live {
		// n4 restarts with the command line it joined with.
		p.cmd = batonCmd(t, "serve", "-node-id", p.id, "-raft-addr", p.raftAddr, "-join", "-addr", p.addr, "-ops-addr", p.opsAddr, "-data-dir", p.dataDir, "-shutdown-linger=0s", "-log-format=json")
		if p.id != "n4" { // founders restart as they started; the log holds the membership
			var peers []string
			for _, q := range procs {
				peers = append(peers, q.id+"="+q.raftAddr)
			}
			p.cmd = batonCmd(t, "serve", "-node-id", p.id, "-raft-addr", p.raftAddr, "-peers", strings.Join(peers, ","),
				"-addr", p.addr, "-ops-addr", p.opsAddr, "-data-dir", p.dataDir, "-shutdown-linger=0s", "-log-format=json")
		}
		p.log = startLogged(t, p.cmd)
	}
	l2 := waitLeader(t, live)
	g2 := readGranted(t, l2.addr, "jobs", time.Second)
	if g2.token <= second {
		t.Fatalf("token after a full-cluster kill -9 and restart %#x, want above %#x", g2.token, second)
	}
}

// TestBinaryRunAcrossFailover: `baton run` given every node's address (the
// leader last, so both runs are first turned away with NOT_LEADER and must
// follow the hint). kill -9 of the leader: the holder's command is stopped
// (exit 77), and the waiter keeps waiting, finds the new leader and runs,
// with a larger token.
func TestBinaryRunAcrossFailover(t *testing.T) {
	t.Parallel()
	procs := newClusterProcs(t)
	l := waitLeader(t, procs)
	list := strings.Join(leaderLast(procs, l), ",")
	dir := t.TempDir()

	holder := batonCmd(t, "run", "-addr", list, "-lease", "1s", "jobs", "--",
		"sh", "-c", `echo "$BATON_TOKEN" >"$0/held.tmp" && mv "$0/held.tmp" "$0/held" && exec sleep 60`, dir)
	hl := startLogged(t, holder)
	first := waitTokenFile(t, filepath.Join(dir, "held"), hl)

	waiter := batonCmd(t, "run", "-addr", list, "-lease", "1s", "jobs", "--",
		"sh", "-c", `echo "$BATON_TOKEN" >"$0/second.tmp" && mv "$0/second.tmp" "$0/second"`, dir)
	wl := startLogged(t, waiter)
	waitQueued(t, l.opsAddr, "jobs", "the second run")

	l.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case err := <-hl.waited:
		hl.waited <- err
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 77 {
			t.Fatalf("holder's baton run after kill -9 of the leader: %v, want exit 77 (lock lost)\n%s", err, strings.Join(hl.seen, "\n"))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("holder's baton run still running 15 s after its leader died")
	}
	select {
	case err := <-wl.waited:
		wl.waited <- err
		if err != nil {
			t.Fatalf("waiting baton run: %v, want exit 0 after the failover\n%s", err, wl.drain(t))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("waiting baton run did not get the lock within 30 s of the failover")
	}
	second := waitTokenFile(t, filepath.Join(dir, "second"), wl)
	if second <= first {
		t.Fatalf("token after failover %d, want above %d", second, first)
	}
}

// waitTokenFile waits for a command run under baton run to write its token.
func waitTokenFile(t *testing.T, path string, l *loggedCmd) uint64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil {
			tok, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", path, b, err)
			}
			return tok
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s within 20 s\n%s", path, strings.Join(l.seen, "\n"))
	return 0
}

// waitersOf returns the number of waiters the node at opsAddr shows for name.
// leaderLast is the client addresses of procs, the leader l's last, so
// that a client is first turned away with NOT_LEADER and must follow the
// hint.
func leaderLast(procs []*clusterProc, l *clusterProc) []string {
	var addrs []string
	for _, p := range procs {
		if p != l {
			addrs = append(addrs, p.addr)
		}
	}
	return append(addrs, l.addr)
}

// waitQueued waits until name has a waiter on the node at opsAddr; who
// says which claim it waits for.
func waitQueued(t *testing.T, opsAddr, name, who string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for waitersOf(opsAddr, name) < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%s never queued on the leader", who)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitersOf(opsAddr, name string) int { return len(opsLockOf(opsAddr, name).Waiters) }

// opsHolders counts a name's holders in a node's ops API.
func opsHolders(opsAddr, name string) int { return len(opsLockOf(opsAddr, name).Holders) }

// opsLockOf is a name's LOCK in a node's ops API; empty if it cannot be
// read.
func opsLockOf(opsAddr, name string) (v struct{ Holders, Waiters []json.RawMessage }) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + opsAddr + "/v1/locks/" + name)
	if err != nil {
		return v
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(&v)
	return v
}

// batonCluster runs a baton cluster command, again while the answer is that
// no leader is known: on a loaded machine a 300 ms heartbeat timeout can
// pass and start an election, and the request was then not carried out.
func batonCluster(t *testing.T, args ...string) (int, string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out := batonOut(t, args...)
		if !strings.Contains(out, "no leader is known") || time.Now().After(deadline) {
			return code, out
		}
		time.Sleep(100 * time.Millisecond)
	}
}
