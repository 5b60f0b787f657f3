//go:build !faultinject

package baton

// The rules below can be switched off only in the faultinject build
// (mutations_faultinject.go), so that TestMutationGate can show that the
// tests catch what each one prevents. Normal builds always keep them.

func resumeAfterReset() bool   { return false }
func adoptAfterDeadline() bool { return false }
func adoptLowerAttempt() bool  { return false }
func resumeInSYN() bool        { return false }
func dialGoneAtOnce() bool     { return false }
