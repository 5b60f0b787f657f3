package opsclient

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
)

// AllHolders is every holder of l, in grant order: from "holder" alone when
// the answer has no "holders" (a server that predates shared claims).
func (l Lock) AllHolders() []Session {
	if len(l.Holders) > 0 || l.Holder == nil {
		return l.Holders
	}
	return []Session{*l.Holder}
}
