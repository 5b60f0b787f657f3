package human

import (
	"testing"
	"time"
)

// TestEscapeHiddenRunes: names and owners reach the terminal with their
// bidi overrides, C1 controls and separators written as escapes, so an
// owner cannot reorder the columns of its row or hide text.
func TestEscapeHiddenRunes(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"worker@host-1", "worker@host-1"},
		{"évier/日本", "évier/日本"},
		{"evil\u202egpj.exe", `evil\u202Egpj.exe`},
		{"c1\u009b31mRED\u0085nl", `c1\u009B31mRED\u0085nl`},
		{"zero\u200bwidth\u2028line", `zero\u200Bwidth\u2028line`},
		{"tag\U000E0041", `tag\U000E0041`},
	} {
		if got := Escape(tt.in); got != tt.want {
			t.Errorf("Escape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestEscapeOneToOne: the name that is literally `jobs/a\u200Bb` (a
// backslash and five letters) and the one with a real U+200B print
// differently, and so do names that differ only in their backslashes.
func TestEscapeOneToOne(t *testing.T) {
	names := []string{"jobs/a\u200Bb", `jobs/a\u200Bb`, `jobs/a\\u200Bb`, `jobs/a\b`, "jobs/a\\b\u200B", `jobs/a\U000E0041`, "jobs/a\U000E0041", "jobs/plain"}
	seen := map[string]string{}
	for _, n := range names {
		got := Escape(n)
		if other, ok := seen[got]; ok {
			t.Errorf("%q and %q both print as %s", other, n, got)
		}
		seen[got] = n
	}
	if got := Escape(`jobs/a\b`); got != `jobs/a\b` {
		t.Errorf("a name with a backslash and nothing hidden prints as %s, want itself", got)
	}
}

func TestAge(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{340*time.Millisecond + 400*time.Microsecond, "340ms"},
		{4240 * time.Millisecond, "4.2s"},
		{12400 * time.Millisecond, "12s"},
		{4*time.Minute + 12*time.Second, "4m12s"},
		{3*time.Hour + 4*time.Minute + 10*time.Second, "3h4m"},
	} {
		if got := Age(tt.d); got != tt.want {
			t.Errorf("Age(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestOneLine(t *testing.T) {
	if got := OneLine("dial tcp:\n  connection\trefused "); got != "dial tcp: connection refused" {
		t.Errorf("OneLine = %q", got)
	}
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"jobs/nightly": "jobs/nightly",
		"a b":          "'a b'",
		"it's":         `'it'\''s'`,
		"":             "''",
	} {
		if got := ShellQuote(in); got != want {
			t.Errorf("ShellQuote(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestShellQuoteHidden: a name printed for pasting into a shell comes back as
// itself, with hidden runes as $'...' escapes.
func TestShellQuoteHidden(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"jobs/nightly", "jobs/nightly"},
		{"it's", `'it'\''s'`},
		{"bidi\u202eX's\\", `$'bidi\u202EX\'s\\'`},
	} {
		if got := ShellQuote(tt.in); got != tt.want {
			t.Errorf("ShellQuote(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
