//go:build !faultinject

package baton

import "testing"

// TestMutationKnobsAbsent: a normal build ignores every knob's variable.
func TestMutationKnobsAbsent(t *testing.T) {
	for _, name := range []string{"BATON_TEST_RESUME_AFTER_RESET", "BATON_TEST_ADOPT_AFTER_DEADLINE",
		"BATON_TEST_ADOPT_LOWER_ATTEMPT", "BATON_TEST_RESUME_IN_SYN", "BATON_TEST_DIAL_GONE_AT_ONCE"} {
		t.Setenv(name, "1")
	}
	if resumeAfterReset() || adoptAfterDeadline() || adoptLowerAttempt() || resumeInSYN() || dialGoneAtOnce() {
		t.Fatal("a normal build switched a rule of the move off")
	}
}
