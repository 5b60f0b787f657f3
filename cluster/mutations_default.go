//go:build !faultinject

package cluster

// The protections below can be switched off only in the faultinject build
// (mutations_faultinject.go), so that the fault harness can show that its
// checker catches what each one prevents. Normal builds always keep them.

func graceDisabled() bool   { return false }
func handoffZero() bool     { return false }
func leaderLeaseOff() bool  { return false }
func wipedJoinStarts() bool { return false }
