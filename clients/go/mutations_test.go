//go:build !faultinject

package baton

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMutationGate builds the client with the faultinject tag and, for
// each of its knobs (mutations_faultinject.go), runs the test that guards
// the rule with the rule switched off: the test must fail. The lines it
// failed with are logged. (It compiles the package once more: skipped in
// -short mode.)
func TestMutationGate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the faultinject variant of the package; skipped in -short mode")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("SKIPPED: no go tool to build the faultinject variant: %v", err)
	}
	for _, m := range []struct{ knob, test string }{
		{"BATON_TEST_RESUME_AFTER_RESET", "TestMoveLosesAfter/a_reset"},
		{"BATON_TEST_ADOPT_AFTER_DEADLINE", "TestAnswerAfterTheDeadlineLoses"},
		{"BATON_TEST_ADOPT_LOWER_ATTEMPT", "TestAttemptsOutOfOrder"},
		{"BATON_TEST_RESUME_IN_SYN", "TestNoFastOpenForResumes"},
		{"BATON_TEST_DIAL_GONE_AT_ONCE", "TestNoAttemptToAServerGoingAway/1_addresses"},
	} {
		t.Run(m.knob, func(t *testing.T) {
			cmd := exec.Command(goTool, "test", "-tags", "faultinject", "-count=1", "-run", "^"+strings.ReplaceAll(m.test, "/", "$/^")+"$", ".")
			cmd.Env = append(os.Environ(), m.knob+"=1")
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("%s passed with %s=1: it does not guard its rule\n%s", m.test, m.knob, out)
			}
			var lines []string
			for _, l := range strings.Split(string(out), "\n") {
				if strings.Contains(l, "_test.go:") {
					lines = append(lines, strings.TrimSpace(l))
				}
			}
			if len(lines) == 0 {
				t.Fatalf("%s with %s=1 failed without a test's line (a build failure?):\n%s", m.test, m.knob, out)
			}
			t.Logf("%s=1: %s failed: %s", m.knob, m.test, strings.Join(lines, "; "))
		})
	}
}
