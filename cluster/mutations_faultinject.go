//go:build faultinject

package cluster

import (
	"net"
	"os"

	"github.com/batonlock/baton/server"
)

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
	// ResolveOnceVar: a member's Raft address is resolved when it enters
	// the membership (the founders', an added member's, this node's own)
	// and kept as the IP it had then, as Consul and Vault once did: a node
	// that comes back at a new IP under the same name is not reached.
	ResolveOnceVar = "BATON_TEST_RESOLVE_ONCE"
	// NoMemberRoomVar: the Raft port counts every source IP as a
	// stranger's: members' IPs have no room of their own (accept.go).
	NoMemberRoomVar = "BATON_TEST_NO_MEMBER_ROOM"
	// NoStrangerEvictionVar: when the strangers' handshakes are all
	// taken, a new connection is closed instead of one of theirs.
	NoStrangerEvictionVar = "BATON_TEST_NO_STRANGER_EVICTION"
	// NoStrangerRateVar: strangers' TLS handshakes compute at once, as
	// members' do: no rate, no CPU slot of their own.
	NoStrangerRateVar = "BATON_TEST_NO_STRANGER_RATE"

	// Protocol version 3. IgnoreListVar: the successor of a planned
	// handover ignores its list (grants at once: every listed holder that
	// has not come back yet may still believe). NoInitialWaitVar: a crash
	// successor answers resumes at once, while a cut-off old leader may
	// still serve. SkipRecordVar: an operator's release or kick, and
	// SUPERSEDED, are not recorded through Raft: a later leader takes the
	// ended claim back in its grace.
	IgnoreListVar    = "BATON_TEST_IGNORE_LIST"
	NoInitialWaitVar = "BATON_TEST_NO_INITIAL_WAIT"
	SkipRecordVar    = "BATON_TEST_SKIP_RECORD"
	// The server's own knobs (server/mutations_faultinject.go), named here
	// with the rest: resumes accepted after the grace, a conflict won by
	// the lower token, a resume accepted without its credential checked.
	ResumeAfterGraceVar  = server.ResumeAfterGraceVar
	LowerTokenWinsVar    = server.LowerTokenWinsVar
	NoCredentialCheckVar = server.NoCredentialCheckVar
	// WipedJoinStartsVar: a node started with -join and no Raft state
	// starts Raft at once, without asking whether it held the log: a
	// member added with -join that lost its data directory votes.
	WipedJoinStartsVar = "BATON_TEST_WIPED_JOIN_STARTS"
)

func graceDisabled() bool  { return os.Getenv(DisableGraceVar) == "1" }
func handoffZero() bool    { return os.Getenv(HandoffZeroVar) == "1" }
func leaderLeaseOff() bool { return os.Getenv(NoLeaderLeaseVar) == "1" }

func memberAddr(addr string) string {
	if os.Getenv(ResolveOnceVar) != "1" {
		return addr
	}
	a, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return addr
	}
	return a.String()
}
func memberRoomOff() bool       { return os.Getenv(NoMemberRoomVar) == "1" }
func strangerEvictionOff() bool { return os.Getenv(NoStrangerEvictionVar) == "1" }
func listIgnored() bool         { return os.Getenv(IgnoreListVar) == "1" }
func initialWaitRemoved() bool  { return os.Getenv(NoInitialWaitVar) == "1" }
func recordSkipped() bool       { return os.Getenv(SkipRecordVar) == "1" }
func strangerRateOff() bool     { return os.Getenv(NoStrangerRateVar) == "1" }
func wipedJoinStarts() bool     { return os.Getenv(WipedJoinStartsVar) == "1" }
