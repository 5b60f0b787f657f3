//go:build faultinject

package cluster

import "os"

// The fault harness's mutation knobs, in test builds only (go build -tags
// faultinject ./cmd/baton). Each switches one safety rule off when its
// variable is "1" in the node's environment, so that the harness can show
// that its checker reports the overlap the rule prevents. Normal builds do
// not contain this file and ignore the variables.
const (
	// DisableGraceVar: a new leader grants at once, without its grace.
	DisableGraceVar = "BATON_TEST_DISABLE_GRACE"
	// HandoffZeroVar: a planned handover always commits a handoff of 0,
	// whatever its holders did and whatever grace it inherited.
	HandoffZeroVar = "BATON_TEST_HANDOFF_ZERO"
	// NoLeaderLeaseVar: the leader confirms and grants without checking its
	// own send-anchored leader lease.
	NoLeaderLeaseVar = "BATON_TEST_NO_LEADER_LEASE"
	// WipedJoinStartsVar: a node started with -join and no Raft state
	// starts Raft at once, without asking whether it held the log: a
	// member added with -join that lost its data directory votes.
	WipedJoinStartsVar = "BATON_TEST_WIPED_JOIN_STARTS"
)

func graceDisabled() bool   { return os.Getenv(DisableGraceVar) == "1" }
func handoffZero() bool     { return os.Getenv(HandoffZeroVar) == "1" }
func leaderLeaseOff() bool  { return os.Getenv(NoLeaderLeaseVar) == "1" }
func wipedJoinStarts() bool { return os.Getenv(WipedJoinStartsVar) == "1" }
