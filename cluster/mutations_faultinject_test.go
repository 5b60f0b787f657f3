//go:build faultinject

package cluster

import "testing"

// TestMutationKnobs: the faultinject build reads each knob's variable, and
// only the value "1".
func TestMutationKnobs(t *testing.T) {
	knobs := map[string]func() bool{DisableGraceVar: graceDisabled, HandoffZeroVar: handoffZero, NoLeaderLeaseVar: leaderLeaseOff,
		NoMemberRoomVar: memberRoomOff, NoStrangerEvictionVar: strangerEvictionOff, NoStrangerRateVar: strangerRateOff,
		IgnoreListVar: listIgnored, NoInitialWaitVar: initialWaitRemoved, SkipRecordVar: recordSkipped, WipedJoinStartsVar: wipedJoinStarts}
	for name, on := range knobs {
		for v, want := range map[string]bool{"1": true, "": false, "0": false, "true": false} {
			t.Setenv(name, v)
			if got := on(); got != want {
				t.Errorf("%s=%q: switched off %v, want %v", name, v, got, want)
			}
		}
	}
}

// TestResolveOnceKnob: with the knob, a member's address enters the
// membership as the IP its name had; without it, as written.
func TestResolveOnceKnob(t *testing.T) {
	for v, want := range map[string]string{"1": "127.0.0.1:7301", "": "localhost:7301", "0": "localhost:7301"} {
		t.Setenv(ResolveOnceVar, v)
		if got := memberAddr("localhost:7301"); got != want {
			t.Errorf("%s=%q: memberAddr(localhost:7301) = %q, want %q", ResolveOnceVar, v, got, want)
		}
	}
}
