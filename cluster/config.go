package cluster

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/batonlock/baton/server"
)

// Peer is one founding member of the cluster.
type Peer struct {
	ID       string
	RaftAddr string
}

// Config is what Open needs. DefaultConfig gives the timers of `baton serve`.
type Config struct {
	// NodeID is this node's name, unique in the cluster. Required.
	NodeID string
	// RaftAddr is the Raft listener, host:port. Without RaftAdvertise it
	// is also what the other nodes dial, so it must be reachable by them.
	// Required.
	RaftAddr string
	// RaftAdvertise is what the other nodes dial, host:port, when it is not
	// RaftAddr: a listener on 0.0.0.0, or a DNS name that follows a node
	// whose IP changes (a pod's). It is kept as written: a name stays a
	// name in the membership and is resolved again at every dial, and over
	// TLS the member is known by its certificate's node id, not by the
	// host name. Empty means RaftAddr.
	RaftAdvertise string
	// Peers are the founding members, this node included unless Join.
	Peers []Peer
	// Join makes a node that is not among Peers wait, with an empty data
	// directory, until a member adds it (POST /v1/cluster/members).
	Join bool
	// DataDir holds the Raft log, stable store and snapshots.
	DataDir string
	// Addr and OpsAddr are the advertised client and ops addresses: what
	// NOT_LEADER and /v1/cluster hand out.
	Addr, OpsAddr string
	// HeartbeatTimeout, ElectionTimeout and LeaderLeaseTimeout are Raft's
	// timers (see hashicorp/raft Config). LeaderLeaseTimeout is how long a
	// leader cut off from a quorum keeps leading: it is in every failover
	// grace (twice), so it trades failover time against false step-downs.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// HandoverDrain bounds how long a leader stopping on purpose waits for
	// its holders to close after ERROR SHUTDOWN.
	HandoverDrain time.Duration
	// BoundLowerEvery is how often the leader looks at whether the lease
	// bound can be lowered; it lowers it only after a whole period in which
	// no session needed it.
	BoundLowerEvery time.Duration
	// TLS, if not nil, makes Raft speak mutual TLS 1.3: it must carry the
	// node's certificate, which names the node by the URI SAN
	// baton://node/<NodeID> (NodeURI), and RootCAs, the cluster's CA. Each
	// side admits the other only if its certificate chains to RootCAs and
	// names a current member (dialing: the member at the dialed address).
	TLS *tls.Config
	// Logger receives leadership changes, member health, and Raft's own
	// warnings and errors (with component=raft; a failing peer's repeated
	// errors summed up); nil means slog.Default().
	Logger *slog.Logger
	// Now reads the clock of the leader lease, the failover grace and the
	// handoff; Hooks gives it to the server, whose leases and MayServe
	// questions are then on it too. Nil is clock.Now, which counts a
	// suspend of the machine: a leader whose host slept past its lease
	// must wake up knowing it is not valid.
	Now func() time.Time
	// HandshakeCPU is the slots in which strangers' TLS handshakes on the
	// Raft port compute, shared with the process's other TLS listeners;
	// nil gives the Raft port slots of its own.
	HandshakeCPU *server.HandshakeCPU
	// SourcePrefixes say which addresses are one source of strangers on
	// the Raft port (their handshakes' rate per source); members are told
	// by their exact IPs.
	SourcePrefixes server.SourcePrefixes
}

// DefaultConfig returns the timers of `baton serve`, tuned for locks on a
// LAN: with 1 s leases a new leader grants within 2.5 s of a crash. The
// detection takes up to 2 x HeartbeatTimeout, a failed first election up to
// 2 x ElectionTimeout more, and the grace is the bound + 2 x
// LeaderLeaseTimeout: 0.4 + 0.4 + 1 + 0.4 = 2.2 s, which leaves 0.3 s for
// the epoch's commit and the clients' reconnection
// (TestDefaultTimersFailoverBudget). The
// earlier 300/300/150 ms summed to exactly 2.5 s with nothing left, and its
// 150 ms leader lease made a new leader on a loaded machine step down in
// its grace (and start it over) in 3 to 8 of 100 kill -9s, against none of
// 90 with these (docs/benchmarks.md, section 10).
func DefaultConfig() Config {
	return Config{
		HeartbeatTimeout:   200 * time.Millisecond,
		ElectionTimeout:    200 * time.Millisecond,
		LeaderLeaseTimeout: 200 * time.Millisecond,
		HandoverDrain:      time.Second,
		BoundLowerEvery:    10 * time.Second,
	}
}

// advertised is the address the other nodes dial: RaftAdvertise, or
// RaftAddr without it.
func (c Config) advertised() string {
	if c.RaftAdvertise != "" {
		return c.RaftAdvertise
	}
	return c.RaftAddr
}

// Validate reports the first setting that cannot work, naming it.
func (c Config) Validate() error {
	if c.NodeID == "" {
		return fmt.Errorf("node-id is empty")
	}
	if _, _, err := net.SplitHostPort(c.RaftAddr); err != nil {
		return fmt.Errorf("raft-addr %q: %v", c.RaftAddr, err)
	}
	if c.RaftAdvertise != "" {
		host, port, err := net.SplitHostPort(c.RaftAdvertise)
		if err != nil {
			return fmt.Errorf("raft-advertise %q: %v", c.RaftAdvertise, err)
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) || port == "" || port == "0" {
			return fmt.Errorf("raft-advertise %q: the other nodes dial it, so it must name a host and a port", c.RaftAdvertise)
		}
	}
	advertised, advertisedFlag := c.advertised(), "-raft-addr"
	if c.RaftAdvertise != "" {
		advertisedFlag = "-raft-advertise"
	}
	if c.DataDir == "" {
		return fmt.Errorf("data-dir is empty")
	}
	self := false
	ids := map[string]bool{}
	addrs := map[string]bool{}
	for _, p := range c.Peers {
		if p.ID == "" {
			return fmt.Errorf("peers: a member has an empty id")
		}
		if ids[p.ID] {
			return fmt.Errorf("peers: id %q appears twice", p.ID)
		}
		if addrs[p.RaftAddr] {
			return fmt.Errorf("peers: raft address %q appears twice", p.RaftAddr)
		}
		ids[p.ID], addrs[p.RaftAddr] = true, true
		if _, port, err := net.SplitHostPort(p.RaftAddr); err != nil || port == "" || port == "0" {
			return fmt.Errorf("peers: member %q has a bad raft address %q", p.ID, p.RaftAddr)
		}
		if p.ID == c.NodeID {
			self = true
			if p.RaftAddr != advertised {
				return fmt.Errorf("peers: this node %q is listed at %q but %s is %q", p.ID, p.RaftAddr, advertisedFlag, advertised)
			}
		}
	}
	switch {
	case !self && !c.Join:
		return fmt.Errorf("peers: this node %q is not in the list; start it with -join to wait to be added", c.NodeID)
	case c.Join && c.TLS != nil && len(c.Peers) == 0:
		return fmt.Errorf("join: over TLS a node waiting to be added admits only the current members, named in -peers (id=raft-host:port,...): give them")
	case self && c.Join:
		return fmt.Errorf("join: node %q is a founding member in -peers; -join is for a node added later", c.NodeID)
	case c.HeartbeatTimeout < 20*time.Millisecond:
		return fmt.Errorf("raft-heartbeat-timeout (%v) must be at least 20ms", c.HeartbeatTimeout)
	case c.ElectionTimeout < c.HeartbeatTimeout:
		return fmt.Errorf("raft-election-timeout (%v) must be at least raft-heartbeat-timeout (%v)", c.ElectionTimeout, c.HeartbeatTimeout)
	case c.LeaderLeaseTimeout < 10*time.Millisecond:
		return fmt.Errorf("raft-leader-lease-timeout (%v) must be at least 10ms", c.LeaderLeaseTimeout)
	case c.LeaderLeaseTimeout > c.HeartbeatTimeout:
		return fmt.Errorf("raft-leader-lease-timeout (%v) must not exceed raft-heartbeat-timeout (%v)", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	case c.HandoverDrain < 0:
		return fmt.Errorf("handover drain (%v) must not be negative", c.HandoverDrain)
	case c.BoundLowerEvery <= 0:
		return fmt.Errorf("bound lowering period (%v) must be positive", c.BoundLowerEvery)
	}
	return nil
}
