package clusterharness

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/proctest"
)

// Bounds for a loaded 2-core machine.
const (
	startWait  = 20 * time.Second // a node process to report its addresses
	leaderWait = 20 * time.Second // a cluster to have a serving leader
)

// testCluster is three (or more) `baton serve` nodes of one cluster, in
// the slots of its network: the founders in the first slots, and slots
// for the members added later (membership_test.go).
type testCluster struct {
	t     *testing.T
	nw    *network
	bin   string
	env   []string // extra environment of every node
	nodes []*node  // one per slot of the network
	// founders is how many slots the founders took; nextID numbers the
	// next member added.
	founders, nextID int
	// token is the ops API's bearer token (in tokenFile): the ops ports
	// are not on loopback in namespaces, so /v1/ needs one.
	token, tokenFile string
}

// node is one slot and the member in it; its process changes with every
// restart, its data directory and addresses do not (a member replaced
// under a new id gets a new data directory in the same slot).
type node struct {
	i  int
	id string // the member's node id; "" while the slot is vacant
	// join and peers are its -join and -peers flags, the same at every
	// restart, as a unit file gives them.
	join  bool
	peers string
	dir   string
	flags []string // extra flags (Raft timers)
	p     *proctest.Proc
	log   *proctest.LogBuffer // every run's output, restarts marked
	up    bool                // started and not yet seen to exit
}

// newCluster makes an n-node cluster on nw, its founders in slots 1 to n
// (the other slots of nw vacant); flags[i] are extra flags of node i+1
// (may be shorter than n). Nodes are not started.
func newCluster(t *testing.T, nw *network, bin string, env []string, n int, flags ...[]string) *testCluster {
	c := &testCluster{t: t, nw: nw, bin: bin, env: env, token: fmt.Sprintf("harness-token-%032d", time.Now().UnixNano()), founders: n, nextID: n + 1}
	c.tokenFile = filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(c.tokenFile, []byte(c.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= nw.n; i++ {
		nd := &node{i: i, log: &proctest.LogBuffer{}}
		if i <= n {
			nd.id, nd.peers = fmt.Sprintf("n%d", i), nw.peers(i, n)
			nd.dir = filepath.Join(t.TempDir(), nd.id)
		}
		if i <= len(flags) {
			nd.flags = flags[i-1]
		}
		c.nodes = append(c.nodes, nd)
	}
	t.Cleanup(func() {
		// BATON_CLUSTER_LOGS=dir keeps every node's log there.
		if dir := os.Getenv("BATON_CLUSTER_LOGS"); dir != "" {
			for _, nd := range c.nodes {
				if nd.log.String() == "" {
					continue // a slot never used
				}
				f := filepath.Join(dir, fmt.Sprintf("%s-slot%d.log", strings.ReplaceAll(t.Name(), "/", "-"), nd.i))
				if err := os.WriteFile(f, []byte(nd.log.String()+"\n"), 0o644); err != nil {
					t.Logf("keep node log: %v", err)
				}
			}
		}
		if t.Failed() {
			for _, nd := range c.nodes {
				if nd.log.String() != "" {
					t.Logf("=== slot %d (now %q) log (last lines):\n%s", nd.i, nd.id, tail(nd.log.String(), 80))
				}
			}
		}
	})
	return c
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (c *testCluster) node(i int) *node { return c.nodes[i-1] }

// clientAddrs is every slot's client address, in slot order (a vacant
// slot refuses connections, as a node that is down does).
func (c *testCluster) clientAddrs() []string {
	var a []string
	for _, nd := range c.nodes {
		a = append(a, c.nw.clientAddr(nd.i))
	}
	return a
}

// startAll starts every member that is not running and waits for each to
// report its addresses (a leader is another matter: waitLeader).
func (c *testCluster) startAll() {
	c.t.Helper()
	var started []chan error
	for _, nd := range c.nodes {
		if nd.id != "" && !nd.up {
			started = append(started, c.launch(nd))
		}
	}
	for _, ch := range started {
		if err := <-ch; err != nil {
			c.t.Fatal(err)
		}
	}
}

// start starts node i and waits until it serves.
func (c *testCluster) start(i int) {
	c.t.Helper()
	if err := <-c.launch(c.node(i)); err != nil {
		c.t.Fatal(err)
	}
}

// launch starts nd's process; the channel says when it serves, or why not.
func (c *testCluster) launch(nd *node) chan error {
	c.t.Helper()
	args := []string{c.bin, "serve", "-node-id", nd.id, "-raft-addr", c.nw.raftAddr(nd.i)}
	if nd.join {
		args = append(args, "-join")
	}
	if nd.peers != "" {
		args = append(args, "-peers", nd.peers)
	}
	args = append(append(args, "-addr", c.nw.clientAddr(nd.i), "-ops-addr", c.nw.opsAddr(nd.i),
		"-data-dir", nd.dir, "-shutdown-linger", "0s", "-log-format", "json", "-admin-token-file", c.tokenFile), nd.flags...)
	cmd := c.nw.command(nd.i, args...)
	cmd.Env = append(cmd.Environ(), c.env...)
	nd.log.Add(fmt.Sprintf("--- start %s %s", nd.id, time.Now().Format("15:04:05.000")))
	serving := make(chan struct{})
	var once sync.Once
	line := func(l string) {
		nd.log.Add(l)
		if strings.Contains(l, `"msg":"baton serving"`) {
			once.Do(func() { close(serving) })
		}
	}
	nd.p = proctest.Start(c.t, cmd, line, line)
	nd.up = true
	p := nd.p
	res := make(chan error, 1)
	go func() { // ends with the first of: serving, exit, timeout
		select {
		case <-serving:
			res <- nil
		case <-p.Exited:
			res <- fmt.Errorf("node %s exited with %d before serving; log:\n%s", nd.id, p.Code, tail(nd.log.String(), 40))
		case <-time.After(startWait):
			res <- fmt.Errorf("node %s did not report its addresses within %v; log:\n%s", nd.id, startWait, tail(nd.log.String(), 40))
		}
	}()
	return res
}

// signal sends sig to node i's process.
func (c *testCluster) signal(i int, sig syscall.Signal) {
	c.t.Helper()
	c.node(i).p.Signal(c.t, sig)
}

// kill kills node i with SIGKILL and waits for its end.
func (c *testCluster) kill(i int) {
	c.t.Helper()
	nd := c.node(i)
	nd.p.Signal(c.t, syscall.SIGKILL)
	nd.p.Wait(c.t, startWait)
	nd.up = false
}

// termWait bounds a SIGTERM's exit: Raft's shutdown waits out dials to a
// peer whose link is cut (10 s each).
const termWait = 45 * time.Second

// terminate sends SIGTERM to node i and waits for exit 0. A node that
// does not exit gets SIGQUIT, so that its goroutines' stacks are in its
// log, before the test fails.
func (c *testCluster) terminate(i int) {
	c.t.Helper()
	nd := c.node(i)
	nd.p.Signal(c.t, syscall.SIGTERM)
	select {
	case <-nd.p.Exited:
	case <-time.After(termWait):
		nd.p.Signal(c.t, syscall.SIGQUIT)
		select {
		case <-nd.p.Exited:
		case <-time.After(5 * time.Second):
		}
		c.t.Fatalf("node n%d still running %v after SIGTERM; its goroutines (SIGQUIT):\n%s", i, termWait, tail(nd.log.String(), 400))
	}
	if nd.p.Code != 0 {
		c.t.Errorf("node n%d exited %d after SIGTERM, want 0", i, nd.p.Code)
	}
	nd.up = false
}

// opsHTTP talks to the nodes' ops ports; no connection outlives a request.
var opsHTTP = &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// leader is the node whose /readyz says it serves (a leader with its epoch
// committed), 0 if none. With more than one (an old leader cut off that has
// not yet noticed), the one with the highest term. Nodes in not are not
// asked (a stopped node would hold each look for the HTTP timeout).
func (c *testCluster) leader(not ...int) int {
	best, bestTerm := 0, uint64(0)
	for _, nd := range c.nodes {
		if !nd.up || slices.Contains(not, nd.i) {
			continue
		}
		resp, err := opsHTTP.Get("http://" + c.nw.opsAddr(nd.i) + "/readyz")
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			continue
		}
		v, err := c.view(nd.i)
		if err == nil && (best == 0 || v.Term > bestTerm) {
			best, bestTerm = nd.i, v.Term
		}
	}
	return best
}

// clusterView is the part of GET /v1/cluster the harness reads.
type clusterView struct {
	NodeID string `json:"node_id"`
	Role   string `json:"role"`
	Term   uint64 `json:"term"`
	Epoch  uint64 `json:"epoch"`
	// LeaseBoundMs and GraceRemainingMs: the committed lease bound, and
	// how much of a leader's failover grace is left.
	LeaseBoundMs     int64 `json:"lease_bound_ms"`
	GraceRemainingMs int64 `json:"grace_remaining_ms"`
	Leader           *struct {
		ID string `json:"id"`
	} `json:"leader"`
}

func (c *testCluster) view(i int) (clusterView, error) {
	var v clusterView
	req, err := http.NewRequest("GET", "http://"+c.nw.opsAddr(i)+"/v1/cluster", nil)
	if err != nil {
		return v, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := opsHTTP.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET /v1/cluster on n%d: %s", i, resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// waitLeader waits for a serving leader other than the nodes in not.
func (c *testCluster) waitLeader(not ...int) int {
	c.t.Helper()
	var l int
	c.eventually(leaderWait, func() bool {
		l = c.leader(not...)
		return l != 0
	}, "no serving leader (other than %v)", not)
	return l
}

// waitFollows waits until node i sees node leader as the leader.
func (c *testCluster) waitFollows(i, leader int) {
	c.t.Helper()
	id := c.node(leader).id
	c.eventually(leaderWait, func() bool {
		v, err := c.view(i)
		return err == nil && v.Leader != nil && v.Leader.ID == id
	}, "node %s does not follow %s", c.node(i).id, id)
}

// eventually polls cond until it holds (for states no event announces:
// the nodes' views through their ops ports), failing the test after within.
func (c *testCluster) eventually(within time.Duration, cond func() bool, format string, args ...any) {
	c.t.Helper()
	for deadline := time.Now().Add(within); !cond(); {
		if time.Now().After(deadline) {
			c.t.Fatalf("after %v: "+format, append([]any{within}, args...)...)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// handoverNote is what nd's last run logged of its planned handover: the
// handoff bound and the transfer's time, or why it was incomplete.
func (nd *node) handoverNote() string {
	log := nd.log.String()
	if i := strings.LastIndex(log, "--- start"); i >= 0 {
		log = log[i:]
	}
	for _, l := range strings.Split(log, "\n") {
		var e struct {
			Msg       string `json:"msg"`
			Handoff   string `json:"handoff"`
			OldBound  string `json:"handoff_bound"`
			AllClosed *bool  `json:"all_closed"`
			Transfer  string `json:"transfer"`
			Holders   int    `json:"holders"`
			Err       string `json:"err"`
		}
		if json.Unmarshal([]byte(l), &e) != nil {
			continue
		}
		switch {
		case e.Msg == "leadership handed over":
			closed := ""
			if e.AllClosed != nil {
				closed = fmt.Sprintf(" (all closed: %v)", *e.AllClosed)
			}
			return fmt.Sprintf("handed over: %d holders%s, handoff %s, transfer %s", e.Holders, closed, e.Handoff+e.OldBound, e.Transfer)
		case strings.Contains(e.Msg, "handover incomplete"):
			return "handover incomplete: " + e.Err
		}
	}
	return "no handover in its log"
}
