package clusterharness

import (
	"testing"
)

// The mutation gate: every safety rule of replicated mode, switched off in
// the faultinject build, must make the checker report a violation; a rule
// whose removal no run notices is a rule the harness does not test.
// .ci/clusterfaults.sh runs it beside the schedule against the normal
// build, which must pass.
//
// Each knob runs the short schedule (stopping at its first violation)
// except two. A wiped joined member that starts is harmless beside
// members that are up to date; it runs the reviewer's scenario instead
// (a joined member replaces a founder, then lagAndWipe), in which its
// vote elects a lagging founder whose tokens go back. And the leader's
// own lease: the schedule's holders never have a
// heartbeat queued at a paused leader that its answer on SIGCONT would
// confirm for longer than the grace, and that answer races the leader's
// step-down, so it runs the paused-leader scenario, in cycles, until the
// checker sees the overlap.
//
// Without the grace, the semaphore must be caught too: more holders of
// semName than its limit (a crowd), not only two holders of a mutex; that
// run goes on until it has seen both.
var mutations = []struct {
	knob      string
	what      string
	semaphore bool // the semaphore must be caught over its limit too
	run       func(t *testing.T, env []string) verdict
}{
	{"BATON_TEST_DISABLE_GRACE", "a new leader grants at once", true, func(t *testing.T, env []string) verdict {
		return runSchedule(t, faultBin, env, rounds(1, false), func(v verdict) bool {
			return (len(v.overlaps) > 0 || len(v.bad) > 0) && len(v.crowds) > 0
		}).verdict
	}},
	{"BATON_TEST_HANDOFF_ZERO", "a planned handover always commits a handoff of 0", false, func(t *testing.T, env []string) verdict {
		return runSchedule(t, faultBin, env, rounds(1, false), func(v verdict) bool { return !v.ok() }).verdict
	}},
	{"BATON_TEST_NO_LEADER_LEASE", "the leader confirms without its own send-anchored lease", false, func(t *testing.T, env []string) verdict {
		v, _ := pausedLeader(t, faultBin, env, true)
		return v
	}},
	{"BATON_TEST_WIPED_JOIN_STARTS", "a member added with -join that lost its disk starts under its id", false, func(t *testing.T, env []string) verdict {
		if why := netnsReason(); why != "" {
			t.Skipf("membership faults need network namespaces (%s)", why)
		}
		return runSchedule(t, faultBin, env, []step{{phaseFast, replaceMember}, {phaseFast, wipeJoinedLagging}},
			func(v verdict) bool { return !v.ok() }).verdict
	}},
}

// TestMutationGate: with each rule off, the checker reports a violation.
func TestMutationGate(t *testing.T) {
	needFaults(t)
	for _, m := range mutations {
		t.Run(m.knob, func(t *testing.T) {
			v := m.run(t, []string{m.knob + "=1"})
			if v.ok() {
				t.Fatalf("%s=1 (%s): the checker found no violation in %d grants: the harness does not see this rule removed", m.knob, m.what, v.holds)
			}
			t.Logf("MUTATION %s=1 (%s): the checker reports %d overlaps, %d semaphore crowds and %d other violations, as it must; the first:",
				m.knob, m.what, len(v.overlaps), len(v.crowds), len(v.bad))
			for i, s := range v.violations() {
				if i == 3 {
					t.Logf("  (%d more)", len(v.violations())-i)
					break
				}
				t.Log("  " + s)
			}
			switch {
			case len(v.crowds) > 0:
				t.Logf("  the semaphore's first crowd (of %d): %v", len(v.crowds), v.crowds[0])
			case m.semaphore:
				t.Errorf("%s=1 (%s): no crowd on semaphore %q (limit %d, %d shared grants, at most %d at once): the harness does not see this rule removed for shared claims",
					m.knob, m.what, semName, semLimit, v.semaphores[semName].grants, v.semaphores[semName].most)
			}
		})
	}
}
