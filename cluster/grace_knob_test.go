//go:build !faultinject

package cluster

import "testing"

// TestGraceKnobAbsent: a normal build ignores BATON_TEST_DISABLE_GRACE.
func TestGraceKnobAbsent(t *testing.T) {
	t.Setenv("BATON_TEST_DISABLE_GRACE", "1")
	if graceDisabled() {
		t.Fatal("a normal build switched the failover grace off")
	}
}
