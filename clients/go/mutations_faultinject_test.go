//go:build faultinject

package baton

import "testing"

// TestMutationKnobs: the faultinject build reads each knob's variable, and
// only the value "1".
func TestMutationKnobs(t *testing.T) {
	knobs := map[string]func() bool{ResumeAfterResetVar: resumeAfterReset, AdoptAfterDeadlineVar: adoptAfterDeadline,
		AdoptLowerAttemptVar: adoptLowerAttempt, ResumeInSYNVar: resumeInSYN, DialGoneAtOnceVar: dialGoneAtOnce}
	for name, on := range knobs {
		for v, want := range map[string]bool{"1": true, "": false, "0": false, "true": false} {
			t.Setenv(name, v)
			if got := on(); got != want {
				t.Errorf("%s=%q: switched off %v, want %v", name, v, got, want)
			}
		}
	}
}
