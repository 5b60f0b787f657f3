//go:build !faultinject

package cluster

// graceDisabled is false in every normal build; see grace_faultinject.go.
func graceDisabled() bool { return false }
