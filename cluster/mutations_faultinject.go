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
	// NoMemberRoomVar: the Raft port counts every source IP as a
	// stranger's: members' IPs have no room of their own (accept.go).
	NoMemberRoomVar = "BATON_TEST_NO_MEMBER_ROOM"
	// NoStrangerEvictionVar: when the strangers' handshakes are all
	// taken, a new connection is closed instead of one of theirs.
	NoStrangerEvictionVar = "BATON_TEST_NO_STRANGER_EVICTION"
)

func graceDisabled() bool  { return os.Getenv(DisableGraceVar) == "1" }
func handoffZero() bool    { return os.Getenv(HandoffZeroVar) == "1" }
func leaderLeaseOff() bool { return os.Getenv(NoLeaderLeaseVar) == "1" }

func memberRoomOff() bool       { return os.Getenv(NoMemberRoomVar) == "1" }
func strangerEvictionOff() bool { return os.Getenv(NoStrangerEvictionVar) == "1" }
