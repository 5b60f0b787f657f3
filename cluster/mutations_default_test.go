//go:build !faultinject

package cluster

import "testing"

// TestMutationKnobsAbsent: a normal build ignores every knob's variable.
func TestMutationKnobsAbsent(t *testing.T) {
	for _, name := range []string{"BATON_TEST_DISABLE_GRACE", "BATON_TEST_HANDOFF_ZERO", "BATON_TEST_NO_LEADER_LEASE",
		"BATON_TEST_RESOLVE_ONCE", "BATON_TEST_NO_MEMBER_ROOM", "BATON_TEST_NO_STRANGER_EVICTION", "BATON_TEST_NO_STRANGER_RATE",
		"BATON_TEST_WIPED_JOIN_STARTS"} {
		t.Setenv(name, "1")
	}
	if graceDisabled() || handoffZero() || leaderLeaseOff() || memberAddr("localhost:7301") != "localhost:7301" || memberRoomOff() ||
		strangerEvictionOff() || strangerRateOff() || wipedJoinStarts() {
		t.Fatal("a normal build switched a safety rule off")
	}
}
