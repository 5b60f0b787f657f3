//go:build faultinject

package baton

import "os"

// The mutation knobs of a claim's move, in test builds only (go test -tags
// faultinject). Each switches one rule of docs/protocol.md section 14 off
// when its variable is "1", so that TestMutationGate can show the test
// that guards it failing. Normal builds do not contain this file and
// ignore the variables.
const (
	// ResumeAfterResetVar: a reset, or any read error, counts as the clean
	// end of a server's process: the claim moves instead of being lost.
	ResumeAfterResetVar = "BATON_TEST_RESUME_AFTER_RESET"
	// AdoptAfterDeadlineVar: a holder adopts an answer to a resume that
	// arrived after its deadline.
	AdoptAfterDeadlineVar = "BATON_TEST_ADOPT_AFTER_DEADLINE"
	// AdoptLowerAttemptVar: an answer of a lower attempt number than the
	// claim's connection is adopted.
	AdoptLowerAttemptVar = "BATON_TEST_ADOPT_LOWER_ATTEMPT"
	// ResumeInSYNVar: a resume rides in a TCP Fast Open SYN.
	ResumeInSYNVar = "BATON_TEST_RESUME_IN_SYN"
	// DialGoneAtOnceVar: an address whose connection ended with no ERROR
	// is dialed again at once, not after goneQuiet.
	DialGoneAtOnceVar = "BATON_TEST_DIAL_GONE_AT_ONCE"
)

func resumeAfterReset() bool   { return os.Getenv(ResumeAfterResetVar) == "1" }
func adoptAfterDeadline() bool { return os.Getenv(AdoptAfterDeadlineVar) == "1" }
func adoptLowerAttempt() bool  { return os.Getenv(AdoptLowerAttemptVar) == "1" }
func resumeInSYN() bool        { return os.Getenv(ResumeInSYNVar) == "1" }
func dialGoneAtOnce() bool     { return os.Getenv(DialGoneAtOnceVar) == "1" }
