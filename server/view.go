package server

import (
	"errors"
	"time"
)

// SessionView describes one session for operators.
type SessionView struct {
	ID     string // decimal, unique for the life of the process
	Remote string // the client's ip:port
	Owner  string
	Lease  time.Duration
	Shared bool // a shared claim (protocol v2)
	Held   bool
	Token  uint64        // holder only
	Since  time.Duration // how long it has held, or waited
	Silent time.Duration // now - lastSeenAt
	// Pending: a claim of a planned handover's list that has not come back
	// yet (protocol v3); it has no connection, and keeps its slot or place
	// until it does or its time is up.
	Pending bool
	// ResumedFromEpoch is the epoch of the token or ticket a resume of the
	// claim named (protocol v3): the term it came from; 0 if it never
	// resumed.
	ResumedFromEpoch uint64
}

// LockView describes one lock that has a holder or waiters.
type LockView struct {
	Name string
	// Holder is the first holder, Holders[0]; nil if nobody holds it at
	// this instant.
	Holder *SessionView
	// Holders are every holder, in grant order: one exclusive claim, or up
	// to Limit shared claims (protocol v2).
	Holders []SessionView
	// Limit is the limit in force for shared claims while the lock has
	// shared sessions; 0 when none.
	Limit   int
	Waiters []SessionView
}

// Errors of the admin calls and of Serve.
var (
	// ErrServerClosed is returned by Serve after Shutdown.
	ErrServerClosed = errors.New("server: closed")
	// ErrNotHeld: force-release of a lock that nobody holds.
	ErrNotHeld = errors.New("lock is not held")
	// ErrEarlierClaimsRefused: force-release, in a crash grace, of a lock
	// none of whose holders has come back yet: recorded, so that none of
	// them will be taken back (protocol version 3).
	ErrEarlierClaimsRefused = errors.New("no holder of the lock has come back since the crash; none of its claims of an earlier term will be taken back")
	// ErrUnknownSession: kick of a session that is not in the table.
	ErrUnknownSession = errors.New("no such session")
	// ErrHolder: kick of a session that holds its lock (use release).
	ErrHolder = errors.New("session holds the lock; use release")
	// ErrWaiter: force-release of a session that waits for its lock (use
	// kick).
	ErrWaiter = errors.New("session waits for the lock; use kick")
)

// Errors of a replicated node's membership calls (package cluster).
var (
	// ErrMemberExists: the id or Raft address is already a member.
	ErrMemberExists = errors.New("already a member")
	// ErrNotMember: the id is not a member.
	ErrNotMember = errors.New("not a member")
)

// ClusterView is a replicated node's state for GET /v1/cluster.
type ClusterView struct {
	NodeID         string
	ClusterID      string // set by the cluster's first epoch
	Role           string // leader, follower, candidate (standalone: see ops)
	Leader         *ClusterNode
	Term, Epoch    uint64
	LeaseBound     time.Duration
	GraceRemaining time.Duration
	// Resumable: claims of version 3 made now get a credential, and so
	// survive a change of leader (the leader gives credentials; elsewhere,
	// the replicated state would let the next leader give them).
	Resumable bool
	Members   []ClusterMember
	// Healthy, VotersHealthy and FailureTolerance are the leader's view
	// (Healthy is nil elsewhere): every member healthy; how many voters
	// are; how many more voters may fail before the cluster loses its
	// quorum (negative: it has lost it).
	Healthy          *bool
	VotersHealthy    int
	FailureTolerance int
}

// ClusterNode is a node's advertised addresses.
type ClusterNode struct{ ID, Addr, OpsAddr string }

// ClusterMember is one member of the Raft configuration.
type ClusterMember struct {
	ID, RaftAddr string
	Voter        bool
	Role         string        // leader, follower or nonvoter
	Health       *MemberHealth // known on the leader only
}

// MemberHealth is one member's health as the leader sees it.
type MemberHealth struct {
	Reachable   bool
	LastContact time.Duration // since its latest reply; -1: never
	Failures    uint64        // requests without a reply since then
	IndexLag    uint64        // log entries behind the leader
	Healthy     bool          // reachable and at most a few entries behind
	Since       time.Duration // how long Healthy has had its value
}
