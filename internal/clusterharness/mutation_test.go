package clusterharness

import (
	"slices"
	"strings"
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
// The knobs of protocol version 3 each run one cycle of resume_test.go's
// workloads, the part the knob breaks alone, on a cluster of their own
// (some 5 to 10 s each): a resume after the grace, the lower token winning
// a conflict, no credential check (a forged resume), the planned list
// ignored (a listed holder cut off before a SIGTERM).
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
	// With every voter speaking version 3 a handover's list covers its
	// holders, and the handoff carries only the rest of the old leader's
	// own grace: the schedule's SIGTERMs rarely fall inside one, so the
	// switch runs the scenario that hands over inside a grace.
	{"BATON_TEST_HANDOFF_ZERO", "a planned handover always commits a handoff of 0", false, func(t *testing.T, env []string) verdict {
		v, _, _ := handoverInsideGrace(t, faultBin, env)
		return v
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
	// Protocol version 3 (resume_test.go): one cycle of the part each
	// knob breaks, on a cluster of its own.
	{"BATON_TEST_RESUME_AFTER_GRACE", "a resume of an earlier term is taken back after the grace", false,
		resumeMutation(rfKill, wantLate, "late")},
	{"BATON_TEST_LOWER_TOKEN_WINS", "a conflict of resumes is won by the lower token", false,
		resumeMutation(rfKill, wantConflict, "conflict")},
	{"BATON_TEST_NO_CREDENTIAL_CHECK", "a resume is accepted without its credential checked", false,
		resumeMutation(rfTerm, wantForged, "forge")},
	{"BATON_TEST_IGNORE_LIST", "the successor of a planned handover ignores its list", false,
		resumeMutation(rfTerm, wantListed, "listed")},
}

// What the knobs of protocol version 3 must make the checker report (a
// part of a violation's text): the violation the knob makes, not a claim
// lost on the way.
const (
	wantLate     = "a resume after the deadline and the grace was answered ACQUIRED"
	wantConflict = "the lower token in a conflict was answered ACQUIRED"
	wantForged   = "a resume with a forged credential before the fault was answered ACQUIRED"
	wantListed   = `lock "listed`
)

var mutationWants = map[string]string{
	"BATON_TEST_RESUME_AFTER_GRACE":  wantLate,
	"BATON_TEST_LOWER_TOKEN_WINS":    wantConflict,
	"BATON_TEST_NO_CREDENTIAL_CHECK": wantForged,
	"BATON_TEST_IGNORE_LIST":         wantListed,
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
			if want := mutationWants[m.knob]; want != "" && !slices.ContainsFunc(v.violations(), func(s string) bool { return strings.Contains(s, want) }) {
				t.Errorf("%s=1 (%s): the checker reports %d violations, none with %q: the harness does not see this rule removed; they are: %q",
					m.knob, m.what, len(v.violations()), want, v.violations())
			}
			t.Logf("MUTATION %s=1 (%s): the checker reports %d overlaps, %d semaphore crowds, %d lost claims, %d FIFO breaks and %d other violations, as it must; the first:",
				m.knob, m.what, len(v.overlaps), len(v.crowds), len(v.lost), len(v.fifo), len(v.bad))
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
