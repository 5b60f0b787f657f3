package batonsys

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/batonlock/baton/bench/internal/proc"
	"github.com/batonlock/baton/bench/internal/system"
	baton "github.com/batonlock/baton/clients/go"
)

// Node is one `baton serve` of a Cluster. Its ports are fixed at the
// start so that a restarted node comes back where its peers expect it.
type Node struct {
	ID, Addr, OpsAddr, RaftAddr string
	dataDir                     string
	p                           *proc.Process // nil while stopped
	last                        *proc.Process // the last life, for its log
}

// PID is the node's process id, 0 while it is stopped.
func (n *Node) PID() int {
	if n.p == nil {
		return 0
	}
	return n.p.PID()
}

// Cluster is three (or more) real `baton serve` nodes in replicated mode
// on loopback, each a process of its own with its own data directory.
type Cluster struct {
	Nodes []*Node
	bin   string
	peers string
	extra []string
	hc    *http.Client
}

// StartCluster runs n nodes of bin on 127.0.0.1 with data directories
// under dir and waits until one of them leads (its /readyz is 200). extra
// flags go to every node.
func StartCluster(ctx context.Context, bin, dir string, n int, extra ...string) (*Cluster, error) {
	addrs, err := freePorts(3 * n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, extra: extra, hc: &http.Client{Timeout: 2 * time.Second}}
	var peers []string
	for i := range n {
		d, err := os.MkdirTemp(dir, fmt.Sprintf("cluster-n%d-", i+1))
		if err != nil {
			return nil, err
		}
		nd := &Node{ID: fmt.Sprintf("n%d", i+1), Addr: addrs[3*i], OpsAddr: addrs[3*i+1], RaftAddr: addrs[3*i+2], dataDir: d}
		c.Nodes = append(c.Nodes, nd)
		peers = append(peers, nd.ID+"="+nd.RaftAddr)
	}
	c.peers = strings.Join(peers, ",")
	for _, nd := range c.Nodes {
		if err := c.Start(ctx, nd); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if _, err := c.Leader(ctx, 20*time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// freePorts finds n free loopback ports below the kernel's ephemeral
// range, by binding and closing them. Not a port the kernel picks: a node
// is restarted on its ports, and in between the clients' own outgoing
// connections take ephemeral ports (one landed on a dead node's port
// once). Another process could still bind one in between; Start then
// retries for a while and fails loudly.
func freePorts(n int) ([]string, error) {
	lo, hi := 10000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > lo+4*n {
				hi = v
			}
		}
	}
	var out []string
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for tries := 0; len(out) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("no %d free loopback ports in %d-%d", n, lo, hi-1)
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", lo+rand.IntN(hi-lo)))
		if err != nil {
			continue
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	return out, nil
}

// Start (re)starts nd with its data directory and waits for its "baton
// serving" line. A port still taken (by a connection of the last life
// closing, say) is retried for up to 5 s.
func (c *Cluster) Start(ctx context.Context, nd *Node) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := c.start(ctx, nd)
		if err == nil || !strings.Contains(err.Error(), "address already in use") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) start(ctx context.Context, nd *Node) error {
	if nd.p != nil {
		return fmt.Errorf("node %s is running (pid %d)", nd.ID, nd.p.PID())
	}
	args := append([]string{"serve", "-node-id", nd.ID, "-raft-addr", nd.RaftAddr, "-peers", c.peers,
		"-addr", nd.Addr, "-ops-addr", nd.OpsAddr, "-data-dir", nd.dataDir, "-shutdown-linger", "0s"}, c.extra...)
	p, err := proc.Start(c.bin, args...)
	if err != nil {
		return err
	}
	nd.p, nd.last = p, p
	deadline := time.Now().Add(15 * time.Second)
	for !servingLine.MatchString(p.Stderr()) {
		select {
		case <-p.Done():
			nd.p = nil
			return fmt.Errorf("node %s exited before serving: %s", nd.ID, p.Stderr())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s (pid %d) not serving within 15s: %s", nd.ID, p.PID(), p.Stderr())
		}
	}
	return nil
}

// Kill sends SIGKILL to nd's PID and waits for it to exit.
func (c *Cluster) Kill(nd *Node) error { return c.signal(nd, syscall.SIGKILL, 5*time.Second) }

// Term sends SIGTERM to nd's PID (a planned handover on the leader) and
// waits for it to exit, at most timeout; it returns an error if the exit
// was not clean.
func (c *Cluster) Term(nd *Node, timeout time.Duration) error {
	return c.signal(nd, syscall.SIGTERM, timeout)
}

func (c *Cluster) signal(nd *Node, sig syscall.Signal, timeout time.Duration) error {
	p := nd.p
	if p == nil {
		return fmt.Errorf("node %s is not running", nd.ID)
	}
	if err := p.Cmd.Process.Signal(sig); err != nil {
		return err
	}
	select {
	case <-p.Done():
	case <-time.After(timeout):
		p.Cmd.Process.Signal(syscall.SIGKILL)
		<-p.Done()
		nd.p = nil
		return fmt.Errorf("node %s still running %v after %v; killed", nd.ID, timeout, sig)
	}
	nd.p = nil
	if sig == syscall.SIGTERM && p.Cmd.ProcessState != nil && p.Cmd.ProcessState.ExitCode() != 0 {
		return fmt.Errorf("node %s exited %d after SIGTERM, want 0: %s", nd.ID, p.Cmd.ProcessState.ExitCode(), tail(p.Stderr()))
	}
	return nil
}

// Stop stops every running node (SIGTERM, SIGKILL after 10 s) and removes
// the data directories.
func (c *Cluster) Stop() {
	for _, nd := range c.Nodes {
		if nd.p != nil {
			nd.p.Stop(10 * time.Second)
			nd.p = nil
		}
		os.RemoveAll(nd.dataDir)
	}
	c.hc.CloseIdleConnections()
}

// Log is what nd wrote to stderr in its current (or last) life.
func (nd *Node) Log() string {
	switch {
	case nd.p != nil:
		return nd.p.Stderr()
	case nd.last != nil:
		return nd.last.Stderr()
	}
	return ""
}

// Ready reports whether nd's /readyz is 200: it leads and serves.
func (c *Cluster) Ready(ctx context.Context, nd *Node) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+nd.OpsAddr+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Member reports whether nd's /readyz?member is 200: it leads, or it is
// a voter that follows a leader it knows (what a rolling restart waits
// for before it stops the next node).
func (c *Cluster) Member(ctx context.Context, nd *Node) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+nd.OpsAddr+"/readyz?member", nil)
	if err != nil {
		return false
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Leader polls /readyz on every running node until one is 200, at most
// within.
func (c *Cluster) Leader(ctx context.Context, within time.Duration) (*Node, error) {
	deadline := time.Now().Add(within)
	for {
		for _, nd := range c.Nodes {
			if nd.p != nil && c.Ready(ctx, nd) {
				return nd, nil
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no node of the cluster ready as leader within %v", within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ClusterView is the part of GET /v1/cluster the bench reads.
type ClusterView struct {
	NodeID string `json:"node_id"`
	Role   string `json:"role"`
	Leader *struct {
		ID string `json:"id"`
	} `json:"leader"`
	Term             uint64 `json:"term"`
	Epoch            uint64 `json:"epoch"`
	LeaseBoundMs     int64  `json:"lease_bound_ms"`
	GraceRemainingMs int64  `json:"grace_remaining_ms"`
	Resumable        *bool  `json:"resumable"`
	Members          []struct {
		ID string `json:"id"`
	} `json:"members"`
}

// View fetches nd's /v1/cluster.
func (c *Cluster) View(ctx context.Context, nd *Node) (ClusterView, error) {
	var v ClusterView
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+nd.OpsAddr+"/v1/cluster", nil)
	if err != nil {
		return v, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("%s /v1/cluster: %s", nd.ID, resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// WaitHealthy waits, at most within, until every node runs and answers
// /v1/cluster, one of them leads with its grace over, and every other
// follows that leader with the same term and epoch (so it has caught up
// with the leader's log at least to its epoch).
func (c *Cluster) WaitHealthy(ctx context.Context, within time.Duration) (*Node, error) {
	deadline := time.Now().Add(within)
	var why error
	for {
		leader, err := c.healthy(ctx)
		if err == nil {
			return leader, nil
		}
		why = err
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("cluster not healthy within %v: %v", within, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Cluster) healthy(ctx context.Context) (*Node, error) {
	views := make([]ClusterView, len(c.Nodes))
	var leader *Node
	var lv ClusterView
	for i, nd := range c.Nodes {
		if nd.p == nil {
			return nil, fmt.Errorf("node %s is stopped", nd.ID)
		}
		v, err := c.View(ctx, nd)
		if err != nil {
			return nil, err
		}
		views[i] = v
		if v.Role == "leader" {
			if leader != nil {
				return nil, errors.New("two nodes say they lead")
			}
			leader, lv = nd, v
		}
	}
	if leader == nil {
		return nil, errors.New("no leader")
	}
	if lv.GraceRemainingMs > 0 || !c.Ready(ctx, leader) {
		return nil, fmt.Errorf("leader %s not ready or in its grace (%d ms left)", leader.ID, lv.GraceRemainingMs)
	}
	if len(lv.Members) != len(c.Nodes) {
		return nil, fmt.Errorf("leader %s has %d members, want %d", leader.ID, len(lv.Members), len(c.Nodes))
	}
	if lv.Resumable != nil && !*lv.Resumable {
		// Claims made before it gives credentials end at the next change
		// of leader (a new cluster's first moments).
		return nil, fmt.Errorf("leader %s gives no credentials yet", leader.ID)
	}
	for i, v := range views {
		if c.Nodes[i] == leader {
			continue
		}
		if v.Role != "follower" || v.Leader == nil || v.Leader.ID != leader.ID || v.Term != lv.Term || v.Epoch != lv.Epoch {
			return nil, fmt.Errorf("node %s: role %s, term %d, epoch %d; leader %s has term %d, epoch %d",
				c.Nodes[i].ID, v.Role, v.Term, v.Epoch, leader.ID, lv.Term, lv.Epoch)
		}
	}
	return leader, nil
}

func tail(s string) string {
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return strings.TrimSpace(s)
}

// ClusterSystem is a Cluster measured through the Go client, given every
// node's address, the leader's first: the scenarios then run against the
// leader exactly as against a standalone server.
type ClusterSystem struct {
	c      *Cluster
	leader *Node
	bin    string
	lease  time.Duration
	opts   []baton.Option
}

// AddOptions gives every client made from now on opts too.
func (s *ClusterSystem) AddOptions(opts ...baton.Option) { s.opts = append(s.opts, opts...) }

// NewClusterSystem measures c, whose current leader is leader, with clients
// holding leases of lease.
func NewClusterSystem(c *Cluster, leader *Node, bin string, lease time.Duration) *ClusterSystem {
	return &ClusterSystem{c: c, leader: leader, bin: bin, lease: lease}
}

// Name implements system.System.
func (s *ClusterSystem) Name() string { return "baton-cluster" }

// Version implements system.System.
func (s *ClusterSystem) Version(ctx context.Context) (string, error) {
	v, err := (&System{bin: s.bin}).Version(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s, %d nodes in replicated mode", v, len(s.c.Nodes)), nil
}

// Addrs are the client addresses, the leader's first.
func (s *ClusterSystem) Addrs() []string {
	addrs := []string{s.leader.Addr}
	for _, nd := range s.c.Nodes {
		if nd != s.leader {
			addrs = append(addrs, nd.Addr)
		}
	}
	return addrs
}

// SetLeader points new clients at leader first (after a leader change).
func (s *ClusterSystem) SetLeader(leader *Node) { s.leader = leader }

// NewClient implements system.System.
func (s *ClusterSystem) NewClient(_ context.Context, id int) (system.Client, error) {
	c, err := baton.New(s.Addrs(), append([]baton.Option{baton.WithLease(s.lease), baton.WithOwner(fmt.Sprintf("bench-cluster-%d", id))}, s.opts...)...)
	if err != nil {
		return nil, err
	}
	return &client{c: c}, nil
}

// Close implements system.System; the cluster is stopped by its owner.
func (s *ClusterSystem) Close() error { return nil }
