package locktable_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// tableMutation breaks one rule: each edit replaces old, found exactly
// once in file, with new. An edit of model_test.go or model_v3_test.go
// makes the model agree with the broken table, so that only a promise,
// checked on what the table says, can catch it.
type tableMutation struct {
	name  string
	edits [][3]string // file, old, new
	run   string      // the tests to run
	want  string      // a regexp the failure must match: the check that guards the rule
}

var tableMutations = []tableMutation{
	{
		name:  "conflict keeps every exclusive claim",
		edits: [][3]string{{"resume.go", "\t\t\tif exclusive || shared > 0 {\n\t\t\t\treturn false\n\t\t\t}\n\t\t\texclusive = true", "\t\t\texclusive = true"}},
		want:  `promise broken: lock "[a-c]" has an exclusive holder beside others`,
	},
	{
		name:  "conflict keeps shared claims past the limit",
		edits: [][3]string{{"resume.go", "case exclusive, shared > 0 && lim != limit, shared >= lim:", "case exclusive, shared > 0 && lim != limit:"}},
		want:  `promise broken: lock "[a-c]" has \d+ shared holders, over its limit`,
	},
	{
		name:  "conflict won by the lower token",
		edits: [][3]string{{"resume.go", "\t\tif !placed && (h == nil || h.token < c.Token) {", "\t\tif !placed {"}},
		want:  `promise broken: (\d+ with token \w+ lost a conflict|token \w+ refused as superseded) on "[a-c]" (to|by) no higher token`,
	},
	{
		name:  "a waiter that comes back goes to the tail",
		edits: [][3]string{{"resume.go", "\tat := l.tail\n\tfor at != nil && at.ticket > s.ticket {\n\t\tat = at.prev\n\t}", "\tat := l.tail"}},
		want:  `promise broken: lock "[a-c]": waiter \d+ with ticket \w+ queued behind`,
	},
	{
		name:  "a pending waiter granted as it comes back keeps its ticket for a token",
		edits: [][3]string{{"resume.go", "\t\tl.unlink(s)\n\t\tt.grant(now, s)", "\t\tl.unlink(s)\n\t\ts.token, s.since = s.ticket, now\n\t\tl.addHolder(s)\n\t\tt.byToken[s.token] = s"}},
		want:  `promise broken: grant to \d+ of "[a-c]": got token \d+, want more than`,
	},
	{
		name:  "a holder that comes back gets a new token",
		edits: [][3]string{{"resume.go", "\t\ttoken:    c.Token,", "\t\ttoken:    map[bool]uint64{true: t.cfg.NextToken()}[c.Token != 0],"}},
		// A pending holder listed gets a new token too.
		want: `promise broken: (holder of token \w+ came back: got .*, want it holding with its token|lock "[a-c]": pending claim \d+ holds token \w+ of this term)`,
	},
	{
		name:  "a pending waiter at the head that comes back is not granted",
		edits: [][3]string{{"resume.go", "if wasPending && s == l.head", "if false && wasPending && s == l.head"}},
		want:  `promise broken: lock "[a-c]": waiter \d+ \(shared (true|false)\) at the head could hold`,
	},
	{
		name: "a pending waiter may be granted (table and model alike)",
		edits: [][3]string{
			{"table.go", "\treturn !w.pending && !w.frozen && l.mayHold(w.shared, l.limit)", "\treturn !w.frozen && l.mayHold(w.shared, l.limit)"},
			{"model_test.go", "\treturn !w.pending && !w.frozen && m.mayHold(name, w.shared, w.limit)", "\treturn !w.frozen && m.mayHold(name, w.shared, w.limit)"},
		},
		want: `promise broken: (lock "[a-c]": pending claim \d+ holds token \w+ of this term: it was granted|pending claim \d+ \(its client away\) granted)`,
	},
	{
		name: "an operator's release of a pending holder frees its slot (table and model alike)",
		edits: [][3]string{
			{"table.go", "\tif s.pending {\n\t\tif s.revoked {\n\t\t\treturn dst, nil\n\t\t}\n\t\treturn t.revoke(now, s, dst), nil\n\t}", ""},
			{"table.go", "\t\tif h.pending {\n\t\t\tdst = t.revoke(now, h, dst)\n\t\t} else {", "\t\tif false {\n\t\t} else {"},
			{"model_test.go", "\tcase cause == locktable.CauseForceReleased && sess.pending && sess.revoked:\n\t\t// Revoked already: nothing to do.\n\tcase cause == locktable.CauseForceReleased && sess.pending:\n\t\tsess.revoked = true\n\t\tw.exits[id] = locktable.CauseRevoked\n\t\ts.v3stats.revoked++\n\tdefault:", "\tdefault:"},
			{"model_test.go", "\t\tif sess := s.m.sessions[id]; sess.pending {\n\t\t\tsess.revoked = true", "\t\tif sess := s.m.sessions[id]; false {\n\t\t\tsess.revoked = true"},
		},
		want: `promise broken: on "[a-c]" these believe they hold together`,
	},
	{
		name: "pending claims' leases left out of the lease bound (table and model alike)",
		edits: [][3]string{
			{"resume.go", "\t\tlongest = max(longest, lease)", "\t\t_ = lease"},
			{"model_test.go", "\tif n != want || longest != wantLongest {", "\tif n != want {"},
		},
		want: `(grant to \d+ of "[a-c]" at \S+: a holder of the crashed run may believe|promise broken: on "[a-c]" these believe they hold together)`,
	},
	{
		name: "resumes admitted after the grace (table and model alike)",
		edits: [][3]string{
			{"resume.go", "if t.graceUntil.IsZero() || c.id() >= t.cfg.ResumeBelow {", "if c.id() >= t.cfg.ResumeBelow {"},
			{"model_v3_test.go", "\tif m.graceUntil.IsZero() || id2 >= m.resumeBelow {", "\tif id2 >= m.resumeBelow {"},
		},
		want: `promise broken: (token \w+ of an earlier term entered "[a-c]" after the grant|lock "[a-c]": holder \d+ with ticket \w+ overtook)`,
	},
	{
		name:  "a move to an attempt not above the claim's",
		edits: [][3]string{{"resume.go", "case c.Attempt <= s.attempt:", "case c.Attempt < s.attempt:"}},
		want:  `promise broken: claim of session \d+ moved to attempt \d+ from attempt \d+`,
	},
	{
		name:  "Seen confirms a frozen claim",
		edits: [][3]string{{"table.go", "\tif s.isFrozen() {\n\t\treturn State{Frozen: true}, false\n\t}", ""}},
		want:  `promise broken: Seen confirmed session \d+, frozen true`,
	},
	{
		name: "a frozen claim moves (table and model alike)",
		edits: [][3]string{
			{"resume.go", "\t\tcase s.isFrozen():\n\t\t\treturn State{}, RefusedFrozen, dst, nil", ""},
			{"model_v3_test.go", "\t\tcase m.frozen(sess):\n\t\t\treturn locktable.RefusedFrozen, nil", ""},
		},
		want: `promise broken: claim of session \d+ moved while frozen true`,
	},
	// Rules no promise names, which the comparison with the model guards
	// (whichever of its comparisons sees it first).
	{
		name:  "a claim that ended in the grace comes back in it",
		edits: [][3]string{{"resume.go", "\tif refusal, ok := t.ended[c.key()]; ok {\n\t\treturn State{}, refusal, dst, nil\n\t}", ""}},
		want:  `seed \d+, step \d+: `,
	},
	{
		name:  "a claim of this term comes back (ResumeBelow ignored)",
		edits: [][3]string{{"resume.go", "if t.graceUntil.IsZero() || c.id() >= t.cfg.ResumeBelow {", "if t.graceUntil.IsZero() {"}},
		want:  `seed \d+, step \d+: `,
	},
	{
		name:  "a frozen waiter may be granted",
		edits: [][3]string{{"table.go", "\treturn !w.pending && !w.frozen && l.mayHold(w.shared, l.limit)", "\treturn !w.pending && l.mayHold(w.shared, l.limit)"}},
		want:  `seed \d+, step \d+: `,
	},
}

// TestMutationGate builds the package with one rule of claims that go on
// broken at a time (a textual mutation of its source, through go test
// -overlay: the tree is untouched) and checks that the randomized test
// fails, with the message of the check that guards the rule. It runs
// with BATON_TABLE_MUTATIONS=1 (CI sets it); a few minutes.
func TestMutationGate(t *testing.T) {
	if os.Getenv("BATON_TABLE_MUTATIONS") != "1" {
		t.Skip("BATON_TABLE_MUTATIONS=1 runs the mutation gate (CI does)")
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	for _, m := range tableMutations {
		t.Run(m.name, func(t *testing.T) {
			tmp := t.TempDir()
			replace := map[string]string{}
			mutated := map[string]string{}
			for _, e := range m.edits {
				file, old, new := e[0], e[1], e[2]
				src, ok := mutated[file]
				if !ok {
					b, err := os.ReadFile(filepath.Join(dir, file))
					if err != nil {
						t.Fatal(err)
					}
					src = string(b)
				}
				if n := strings.Count(src, old); n != 1 {
					t.Fatalf("%s: the mutation's text is found %d times, want once: the source moved, update the gate", file, n)
				}
				mutated[file] = strings.Replace(src, old, new, 1)
			}
			for file, src := range mutated {
				out := filepath.Join(tmp, file)
				if err := os.WriteFile(out, []byte(src), 0o600); err != nil {
					t.Fatal(err)
				}
				replace[filepath.Join(dir, file)] = out
			}
			overlay, _ := json.Marshal(map[string]any{"Replace": replace})
			ovFile := filepath.Join(tmp, "overlay.json")
			if err := os.WriteFile(ovFile, overlay, 0o600); err != nil {
				t.Fatal(err)
			}
			run := m.run
			if run == "" {
				run = "TestRandomSchedules$"
			}
			cmd := exec.Command(goBin, "test", "-count=1", "-overlay", ovFile, "-run", run, ".")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "BATON_TABLE_MUTATIONS=")
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the mutation survived: %s passed", run)
			}
			line := regexp.MustCompile(m.want).FindString(string(out))
			if line == "" {
				t.Fatalf("%s failed, but not with /%s/:\n%s", run, m.want, firstLines(string(out), 12))
			}
			for _, l := range strings.Split(string(out), "\n") {
				if strings.Contains(l, line) {
					t.Logf("caught: %s", strings.TrimSpace(l[:min(len(l), 300)]))
					break
				}
			}
		})
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
