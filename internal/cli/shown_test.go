package cli

import (
	"strings"
	"testing"
)

// TestShownEscapesHiddenRunes: names and owners reach the terminal with
// their bidi overrides, C1 controls and separators written as escapes, so
// an owner cannot reorder the columns of its row or hide text.
func TestShownEscapesHiddenRunes(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"worker@host-1", "worker@host-1"},
		{"évier/日本", "évier/日本"},
		{"evil\u202egpj.exe", `evil\u202egpj.exe`},
		{"c1\u009b31mRED\u0085nl", `c1\u009b31mRED\u0085nl`},
		{"zero\u200bwidth\u2028line", `zero\u200bwidth\u2028line`},
		{"tag\U000E0041", `tag\U000e0041`},
	} {
		if got := shown(tt.in); got != tt.want {
			t.Errorf("shown(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	for _, tt := range []struct{ in, want string }{
		{"jobs/nightly", "jobs/nightly"},
		{"it's", `'it'\''s'`},
		{"bidi\u202eX's\\", `$'bidi\u202eX\'s\\'`},
	} {
		if got := shellQuote(tt.in); got != tt.want {
			t.Errorf("shellQuote(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestPrintLocksShowsNoHiddenRunes: baton locks' table, fed an answer
// whose names and owners carry a right-to-left override and C1 controls,
// prints none of them raw.
func TestPrintLocksShowsNoHiddenRunes(t *testing.T) {
	tok := uint64(7)
	limit := 3
	locks := []opsLock{{
		Name:  "bidi\u202eX",
		Limit: &limit,
		Holders: []opsSession{
			{ID: "1", Owner: "evil\u202egpj.exe", Token: &tok, Shared: true},
			{ID: "2", Owner: "c1\u009b31m", Token: &tok, Shared: true},
		},
		Waiters: []opsSession{{ID: "3", Owner: "w\u2067aiter"}},
	}}
	var b strings.Builder
	printLock(&b, locks[0])
	out := b.String()
	if i := strings.IndexFunc(out, func(r rune) bool { return r != '\n' && hiddenRune(r) }); i >= 0 {
		t.Fatalf("baton locks printed a hidden rune raw at byte %d:\n%q", i, out)
	}
	for _, want := range []string{`bidi\u202eX`, `evil\u202egpj.exe`, `c1\u009b31m`, `w\u2067aiter`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
}
