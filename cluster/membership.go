package cluster

import (
	"errors"
	"fmt"
	"net"

	"github.com/hashicorp/raft"

	"github.com/batonlock/baton/server"
)

// Membership errors, shared with the ops API through package server.
var (
	ErrNotMember    = server.ErrNotMember
	ErrMemberExists = server.ErrMemberExists
)

// AddMember adds a voter (on the leader only: server.ErrNotLeader).
func (n *Node) AddMember(id, raftAddr string) error {
	if id == "" {
		return fmt.Errorf("member id is empty")
	}
	if _, port, err := net.SplitHostPort(raftAddr); err != nil || port == "" || port == "0" {
		return fmt.Errorf("raft address %q is not host:port", raftAddr)
	}
	conf, err := n.members()
	if err != nil {
		return err
	}
	for _, s := range conf {
		if string(s.ID) == id || string(s.Address) == raftAddr {
			return fmt.Errorf("%w: %s at %s", ErrMemberExists, s.ID, s.Address)
		}
	}
	if err := n.r().AddVoter(raft.ServerID(id), raft.ServerAddress(memberAddr(raftAddr)), 0, applyTimeout).Error(); err != nil {
		return n.mapErr("add member", err)
	}
	n.log.Info("member added", "id", id, "raft_addr", raftAddr)
	return nil
}

// RemoveMember removes a member (on the leader only: server.ErrNotLeader).
func (n *Node) RemoveMember(id string) error {
	conf, err := n.members()
	if err != nil {
		return err
	}
	found := false
	for _, s := range conf {
		found = found || string(s.ID) == id
	}
	if !found {
		return fmt.Errorf("%w: %q", ErrNotMember, id)
	}
	if err := n.r().RemoveServer(raft.ServerID(id), 0, applyTimeout).Error(); err != nil {
		return n.mapErr("remove member", err)
	}
	n.log.Info("member removed", "id", id)
	return nil
}

func (n *Node) mapErr(what string, err error) error {
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
		return server.ErrNotLeader
	}
	return fmt.Errorf("%s: %w", what, err)
}

func (n *Node) members() ([]raft.Server, error) {
	r := n.r()
	if r == nil {
		return nil, server.ErrNotLeader
	}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("read membership: %w", err)
	}
	return f.Configuration().Servers, nil
}

func (n *Node) isMember(id raft.ServerID) bool {
	r := n.r()
	if r == nil {
		return false
	}
	for _, s := range r.GetConfiguration().Configuration().Servers {
		if s.ID == id {
			return true
		}
	}
	return false
}

// leaderAddrs is the advertised addresses of the leader Raft names, if it
// is another node and a current member of the configuration: what the
// replicated state says of a node that is not a member (a removed one) is
// never trusted.
func (n *Node) leaderAddrs() (nodeAddrs, bool) {
	r := n.r()
	if r == nil {
		return nodeAddrs{}, false
	}
	_, id := r.LeaderWithID()
	if id == "" || string(id) == n.cfg.NodeID || !n.isMember(id) {
		return nodeAddrs{}, false
	}
	a, ok := n.fsm.get().Nodes[string(id)]
	return a, ok && a.Addr != ""
}

// LeaderOpsAddr is the leader's advertised ops address ("" if unknown, or
// if the leader Raft names is not a current member) and whether this node
// is the leader.
func (n *Node) LeaderOpsAddr() (string, bool) {
	if n.leading.Load() {
		return n.cfg.OpsAddr, true
	}
	a, ok := n.leaderAddrs()
	if !ok {
		return "", false
	}
	return a.OpsAddr, false
}

// View is GET /v1/cluster. A founder still asking the others whether to
// bootstrap is a follower with no term, and lists the founders.
func (n *Node) View() server.ClusterView {
	st := n.fsm.get()
	v := server.ClusterView{
		NodeID:     n.cfg.NodeID,
		ClusterID:  st.ClusterID,
		Role:       "follower",
		Epoch:      st.Epoch,
		LeaseBound: st.LeaseBound,
	}
	r := n.r()
	if r == nil {
		for _, p := range n.cfg.Peers {
			v.Members = append(v.Members, server.ClusterMember{ID: p.ID, RaftAddr: p.RaftAddr, Voter: true})
		}
		return v
	}
	v.Term = r.CurrentTerm()
	switch r.State() {
	case raft.Leader:
		v.Role = "leader"
	case raft.Candidate:
		v.Role = "candidate"
	}
	if _, id := r.LeaderWithID(); id != "" && n.isMember(id) {
		a := st.Nodes[string(id)]
		if string(id) == n.cfg.NodeID {
			a = nodeAddrs{Addr: n.cfg.Addr, OpsAddr: n.cfg.OpsAddr}
		}
		v.Leader = &server.ClusterNode{ID: string(id), Addr: a.Addr, OpsAddr: a.OpsAddr}
	}
	if n.leading.Load() {
		v.GraceRemaining = n.srv.GraceRemaining()
		v.Resumable = n.giving.Load()
	} else {
		v.Resumable = n.mayGive()
	}
	_, leaderID := r.LeaderWithID()
	health := map[raft.ServerID]MemberHealth{}
	hs := n.Health()
	for _, h := range hs {
		health[h.ID] = h
	}
	if conf, err := n.members(); err == nil {
		healthy := len(hs) > 0
		voters, votersHealthy := 0, 0
		for _, s := range conf {
			m := server.ClusterMember{ID: string(s.ID), RaftAddr: string(s.Address), Voter: s.Suffrage == raft.Voter, Role: "follower"}
			switch {
			case s.ID == leaderID:
				m.Role = "leader"
			case s.Suffrage != raft.Voter:
				m.Role = "nonvoter"
			}
			if h, ok := health[s.ID]; ok {
				m.Health = &server.MemberHealth{Reachable: h.Reachable, LastContact: h.LastContact, Failures: h.Failures,
					IndexLag: h.IndexLag, Healthy: h.Healthy, Since: h.Since}
				healthy = healthy && h.Healthy
				if m.Voter && h.Healthy {
					votersHealthy++
				}
			} else if len(hs) > 0 {
				m.Health = notYetAnswered()
				healthy = false
			}
			if m.Voter {
				voters++
			}
			v.Members = append(v.Members, m)
		}
		if len(hs) > 0 {
			v.Healthy = &healthy
			v.VotersHealthy = votersHealthy
			v.FailureTolerance = votersHealthy - (voters/2 + 1)
		}
	}
	return v
}
