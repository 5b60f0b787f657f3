//go:build faultinject

package cluster

import "testing"

// TestGraceKnob: the faultinject build reads BATON_TEST_DISABLE_GRACE=1,
// and only that value.
func TestGraceKnob(t *testing.T) {
	for v, want := range map[string]bool{"1": true, "": false, "0": false, "true": false} {
		t.Setenv("BATON_TEST_DISABLE_GRACE", v)
		if got := graceDisabled(); got != want {
			t.Errorf("BATON_TEST_DISABLE_GRACE=%q: disabled %v, want %v", v, got, want)
		}
	}
}
