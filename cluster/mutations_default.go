//go:build !faultinject

package cluster

// The protections below can be switched off only in the faultinject build
// (mutations_faultinject.go), so that the fault harness can show that its
// checker catches what each one prevents. Normal builds always keep them.

func graceDisabled() bool  { return false }
func handoffZero() bool    { return false }
func leaderLeaseOff() bool { return false }

// memberAddr is a member's Raft address as it enters the membership: as
// written, so that a DNS name is resolved at each dial.
func memberAddr(addr string) string { return addr }
func memberRoomOff() bool           { return false }
func strangerEvictionOff() bool     { return false }
func listIgnored() bool             { return false }
func initialWaitRemoved() bool      { return false }
func recordSkipped() bool           { return false }
func strangerRateOff() bool         { return false }
func wipedJoinStarts() bool         { return false }
