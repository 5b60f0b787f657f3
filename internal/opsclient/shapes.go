package opsclient

import "time"

// The JSON shapes of the ops API (docs/operations.md).
type (
	// Session is a holder or a waiter.
	Session struct {
		ID       string  `json:"id"`
		Remote   string  `json:"remote"`
		Owner    string  `json:"owner"`
		LeaseMS  int64   `json:"lease_ms"`
		Shared   bool    `json:"shared"`
		Token    *uint64 `json:"token"`
		SinceMS  int64   `json:"since_ms"`
		SilentMS int64   `json:"silent_ms"`
		// ResumedFromEpoch is the epoch of the token or ticket a claim of
		// protocol version 3 resumed with; 0 if it never resumed.
		ResumedFromEpoch uint64 `json:"resumed_from_epoch"`
	}
	// Lock is one lock: GET /v1/locks/{name}.
	Lock struct {
		Name    string    `json:"name"`
		Holder  *Session  `json:"holder"`
		Waiters []Session `json:"waiters"`
		Holders []Session `json:"holders"` // every holder, in grant order
		Limit   *int      `json:"limit"`   // the limit in force for shared claims; null when none
		// GraceRemainingMS is how long the server still grants nothing.
		GraceRemainingMS int64 `json:"grace_remaining_ms"`
	}
	// Locks is every lock: GET /v1/locks.
	Locks struct {
		Locks            []Lock `json:"locks"`
		GraceRemainingMS int64  `json:"grace_remaining_ms"`
	}
	// Event is one EVENT of the event stream: GET /v1/events.
	Event struct {
		Seq     uint64    `json:"seq"`
		At      time.Time `json:"at"`
		Type    string    `json:"type"`
		Lock    string    `json:"lock"`
		Session Session   `json:"session"`
		// Replaces, for a resumed event, is the session the claim left.
		Replaces string `json:"replaces"`
	}
	// Cluster is GET /v1/cluster (CLUSTER).
	Cluster struct {
		NodeID string `json:"node_id"`
		Role   string `json:"role"`
		Leader *struct {
			ID      string `json:"id"`
			Addr    string `json:"addr"`
			OpsAddr string `json:"ops_addr"`
		} `json:"leader"`
		Term             uint64          `json:"term"`
		Epoch            uint64          `json:"epoch"`
		LeaseBoundMS     int64           `json:"lease_bound_ms"`
		GraceRemainingMS int64           `json:"grace_remaining_ms"`
		Resumable        *bool           `json:"resumable"`
		Members          []ClusterMember `json:"members"`
		Healthy          *bool           `json:"healthy"`
		VotersHealthy    *int            `json:"voters_healthy"`
		FailureTolerance *int            `json:"failure_tolerance"`
	}
	// ClusterMember is one member of CLUSTER.
	ClusterMember struct {
		ID       string `json:"id"`
		RaftAddr string `json:"raft_addr"`
		Voter    bool   `json:"voter"`
		Role     string `json:"role"`
		Health   *struct {
			Reachable     bool   `json:"reachable"`
			LastContactMs *int64 `json:"last_contact_ms"`
			Failures      uint64 `json:"failures"`
			IndexLag      uint64 `json:"index_lag"`
			Healthy       bool   `json:"healthy"`
			SinceMs       int64  `json:"since_ms"`
		} `json:"health"`
	}
)

// AllHolders is every holder of l, in grant order: from "holder" alone when
// the answer has no "holders" (a server that predates shared claims).
func (l Lock) AllHolders() []Session {
	if len(l.Holders) > 0 || l.Holder == nil {
		return l.Holders
	}
	return []Session{*l.Holder}
}

// Member is member id of v, or nil.
func (v Cluster) Member(id string) *ClusterMember {
	for i := range v.Members {
		if v.Members[i].ID == id {
			return &v.Members[i]
		}
	}
	return nil
}

// Answered reports whether member id of v has answered the leader.
func (v Cluster) Answered(id string) bool {
	m := v.Member(id)
	return m != nil && m.Health != nil && m.Health.LastContactMs != nil
}
