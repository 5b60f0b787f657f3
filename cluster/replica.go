package cluster

import (
	"time"

	"github.com/batonlock/baton/server"
)

// Node is the Replica of its server: the lease bound, the leader lease, the
// leader's address.
var _ server.Replica = (*Node)(nil)

// Hooks sets what a replicated server needs of this node in cfg: the node
// itself as its Replica, tokens and tickets, the resume credentials, and
// the clock, so that the instants the server asks MayServe about are on
// the leader lease's.
func (n *Node) Hooks(cfg *server.Config) {
	cfg.Replica = n
	cfg.Now = n.now
	cfg.NextToken = n.NextToken
	cfg.Resume = resumeSource{n}
	cfg.NextTicket = n.tok.nextTicket
}

// NextToken is server.Config.NextToken.
func (n *Node) NextToken() uint64 { return n.tok.next() }

// LeaderHint is server.Replica.LeaderHint: the leader's advertised client
// address, "" while none is known (or while this node is the one taking
// over, so that no client is sent back to it). Only a current member's
// address is ever handed out.
func (n *Node) LeaderHint() string {
	a, ok := n.leaderAddrs()
	if !ok {
		return ""
	}
	return a.Addr
}

// MayServe is server.Replica.MayServe: whether this leader's own lease,
// anchored at the send times a quorum acknowledged, still holds at now.
func (n *Node) MayServe(now time.Time) bool { return n.lease.valid(now) }

// TermLost is server.Replica.TermLost: the server failed closed and ended
// every session; the leader loop takes a new epoch once the lease holds
// again, if this node still leads.
func (n *Node) TermLost() {
	n.leaseLapses.Add(1)
	n.leading.Store(false)
	select {
	case n.termLost <- struct{}{}:
	default:
	}
}
