//go:build !faultinject

package server

// The rules of protocol version 3 below can be switched off only in the
// faultinject build (mutations_faultinject.go), so that the fault harness
// can show that its checker catches what each one prevents. Normal builds
// always keep them.

func resumeAfterGrace() bool  { return false }
func lowerTokenWins() bool    { return false }
func noCredentialCheck() bool { return false }
