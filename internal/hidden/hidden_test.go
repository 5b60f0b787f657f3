package hidden

import (
	"strings"
	"testing"
	"unicode"
)

// lookAlikes are the characters a review found shown raw by the dashboard
// (each makes a name look like another), and one of each class beside
// them.
var lookAlikes = []rune{
	0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, 0x00AD, 0x034F, 0x3164, 0xE0041, 0xFE0F, // the review's
	0x202E, 0x2066, 0x0085, 0x009B, 0x2028, 0x2029, // bidi, C1, separators
	0x00A0, 0x3000, 0x2007, // spaces that are not U+0020
	0x115F, 0x1160, 0xFFA0, // the other Hangul fillers
	0xFE00, 0xE0100, 0x180B, 0x180F, // variation selectors
	0xE000, 0xF0000, // private use
	0xFFFE, 0x10FFFF, 0x0378, // noncharacters, unassigned
	0xFFFD, 0x7F, 0x1B, 0,
}

func TestLookAlikesAreHidden(t *testing.T) {
	for _, r := range lookAlikes {
		if !Rune(r) {
			t.Errorf("U+%04X is shown as itself, want hidden", r)
		}
	}
	for _, r := range "az AZ09/._-:@é日本ЖΩ€😀❤" {
		if Rune(r) {
			t.Errorf("%q (U+%04X) is hidden, want shown", r, r)
		}
	}
}

func TestEscape(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"jobs/nightly", "jobs/nightly"},
		{"évier/日本", "évier/日本"},
		{"evil\u202egpj.exe", `evil\u202Egpj.exe`},
		{"jobs\u200b/x", `jobs\u200B/x`},
		{"tag\U000E0041", `tag\U000E0041`},
		{"a\u00a0b", `a\u00A0b`},
		{"\u3164", `\u3164`},
	} {
		if got := Escape(tt.in); got != tt.want {
			t.Errorf("Escape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestRangesAreTheRule: the ranges (and so the dashboard's expression)
// hold exactly the code points Rune hides, and the classes the package's
// doc names are in them whole.
func TestRangesAreTheRule(t *testing.T) {
	in := make(map[rune]bool)
	var last rune = -2
	for _, r := range Ranges() {
		if r.Lo <= last+1 || r.Hi < r.Lo {
			t.Fatalf("range %X-%X after %X: not ascending, disjoint and apart", r.Lo, r.Hi, last)
		}
		for c := r.Lo; c <= r.Hi; c++ {
			in[c] = true
		}
		last = r.Hi
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if in[r] != Rune(r) {
			t.Fatalf("U+%04X: in the ranges %v, Rune %v", r, in[r], Rune(r))
		}
		whole := unicode.In(r, unicode.Cc, unicode.Cf, unicode.Cn, unicode.Co, unicode.Cs, unicode.Zl, unicode.Zp,
			unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector) ||
			(unicode.Is(unicode.Zs, r) && r != ' ')
		if whole && !Rune(r) {
			t.Fatalf("U+%04X is in a hidden class but shown", r)
		}
	}
	s := Script()
	if !strings.HasPrefix(strings.SplitN(s, "export const HIDDEN = /[", 2)[1], `\u{0}-\u{1F}`) || !strings.HasSuffix(s, "]/gu;\n") {
		t.Fatalf("Script() = %.200q...", s)
	}
}

// TestBlankGraphicsHidden: graphic characters drawn as nothing are
// escaped: U+2800 BRAILLE PATTERN BLANK, U+1D159 MUSICAL SYMBOL NULL
// NOTEHEAD, U+16FE4 KHITAN SMALL SCRIPT FILLER.
func TestBlankGraphicsHidden(t *testing.T) {
	for _, r := range []rune{0x2800, 0x1D159, 0x16FE4} {
		if !Rune(r) {
			t.Errorf("U+%04X is shown as itself, want it escaped (drawn blank)", r)
		}
	}
	if got := Escape("own\u2800er"); got != `own\u2800er` {
		t.Errorf("Escape(own U+2800 er) = %s, want own\\u2800er", got)
	}
}
