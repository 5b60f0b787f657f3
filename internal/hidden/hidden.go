// Package hidden is the one rule for the characters of lock names and owner
// texts that a terminal or a page would not show as themselves, and so
// could make two names look the same or reorder what is printed around
// them. The operator commands escape them (internal/cli), and the
// dashboard escapes exactly the same set: ops serves it to the page as a
// regular expression (Script).
//
// The protocol refuses only the bytes below 0x20 and 0x7F in a name, so a
// name can hold everything else. Hidden are:
//
//   - controls (Cc: C0, DEL, C1) and format characters (Cf: the bidi
//     overrides and isolates, U+200B to U+200F, U+2060, U+FEFF, U+00AD,
//     the tags U+E0000 to U+E007F...);
//   - line and paragraph separators (Zl, Zp), and every space but U+0020
//     (Zs: U+00A0, U+3000...), which look like a space and are not one;
//   - the other default-ignorable code points, which render as nothing:
//     the variation selectors (U+FE00 to U+FE0F, U+E0100 to U+E01EF,
//     U+180B to U+180F), U+034F, the Hangul fillers (U+115F, U+1160,
//     U+3164, U+FFA0) and the reserved ones;
//   - private-use characters (Co), surrogates (Cs) and code points that
//     the Unicode edition of Go's tables (unicode.Version) does not assign
//     (Cn, noncharacters included): no one can tell what they look like;
//   - U+FFFD, which stands for bytes that were not UTF-8;
//   - the few graphic characters that are drawn blank: U+2800 BRAILLE
//     PATTERN BLANK (the classic invisible name), U+1D159 MUSICAL SYMBOL
//     NULL NOTEHEAD and U+16FE4 KHITAN SMALL SCRIPT FILLER.
//
// Each is written as an escape: \u202E for one of the Basic Multilingual
// Plane, \U000E0041 beyond it (upper-case hex digits, the form of Go,
// Python and bash's $'...').
package hidden

import (
	"fmt"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Rune reports whether r is hidden (see the package's doc).
func Rune(r rune) bool {
	if r < utf8.RuneSelf {
		return r < 0x20 || r == 0x7F
	}
	if r > unicode.MaxRune {
		return true
	}
	t := table()
	return t.bits[r>>6]&(1<<(r&63)) != 0
}

// Has reports whether s holds a hidden rune.
func Has(s string) bool { return strings.IndexFunc(s, Rune) >= 0 }

// Escape returns s with each hidden rune written as its escape; s itself
// when it has none.
func Escape(s string) string {
	if !Has(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		WriteRune(&b, r)
	}
	return b.String()
}

// WriteRune writes r to b: itself, or its escape if it is hidden.
func WriteRune(b *strings.Builder, r rune) {
	if !Rune(r) {
		b.WriteRune(r)
		return
	}
	b.WriteString(EscapeRune(r))
}

// EscapeRune is r's escape: \u202E, or \U000E0041 beyond U+FFFF.
func EscapeRune(r rune) string {
	if r > 0xFFFF {
		return fmt.Sprintf(`\U%08X`, r)
	}
	return fmt.Sprintf(`\u%04X`, r)
}

// A Range is the hidden code points from Lo to Hi, both included.
type Range struct{ Lo, Hi rune }

// Ranges returns the hidden code points as ascending, disjoint ranges.
func Ranges() []Range {
	return table().ranges
}

// Script is the JavaScript module that gives the dashboard the same rule:
// it exports HIDDEN, a global regular expression with the u flag that
// matches one hidden code point.
func Script() string {
	t := table()
	t.scriptOnce.Do(func() {
		var b strings.Builder
		b.WriteString("// The characters of names and owners that the page shows escaped: the\n")
		b.WriteString("// rule of the operator commands, made by the server from its own tables\n")
		b.WriteString("// (Unicode " + unicode.Version + ").\n")
		b.WriteString("export const HIDDEN = /[")
		for _, r := range t.ranges {
			fmt.Fprintf(&b, `\u{%X}`, r.Lo)
			if r.Hi != r.Lo {
				fmt.Fprintf(&b, `-\u{%X}`, r.Hi)
			}
		}
		b.WriteString("]/gu;\n")
		t.script = b.String()
	})
	return t.script
}

// hiddenTable is the rule as a bit per code point, and as ranges.
type hiddenTable struct {
	bits       [(unicode.MaxRune + 1) / 64]uint64
	ranges     []Range
	scriptOnce sync.Once
	script     string
}

var (
	tableOnce sync.Once
	tableData *hiddenTable
)

// table builds the rule once, at its first use beyond ASCII: a few
// milliseconds, which a command that prints only ASCII never pays.
func table() *hiddenTable {
	tableOnce.Do(func() {
		t := new(hiddenTable)
		// unicode.C is Cc, Cf, Co, Cs and Cn (unassigned).
		for _, tab := range []*unicode.RangeTable{
			unicode.C, unicode.Zl, unicode.Zp, unicode.Zs,
			unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector,
		} {
			forEach(tab, func(r rune) { t.bits[r>>6] |= 1 << (r & 63) })
		}
		t.bits[0] &^= 1 << ' ' // the one space that is itself
		for _, r := range blankGraphics {
			t.bits[r>>6] |= 1 << (r & 63)
		}
		for r := rune(0); r <= unicode.MaxRune; r++ {
			if t.bits[r>>6]&(1<<(r&63)) == 0 {
				if t.bits[r>>6] == 0 {
					r |= 63 // a whole word shown: skip it
				}
				continue
			}
			if n := len(t.ranges); n > 0 && t.ranges[n-1].Hi == r-1 {
				t.ranges[n-1].Hi = r
			} else {
				t.ranges = append(t.ranges, Range{r, r})
			}
		}
		tableData = t
	})
	return tableData
}

// blankGraphics are the code points outside the classes above that are
// drawn as nothing (see the package's doc), and U+FFFD.
var blankGraphics = []rune{unicode.ReplacementChar, 0x2800, 0x1D159, 0x16FE4}

// forEach calls f with every code point of tab.
func forEach(tab *unicode.RangeTable, f func(rune)) {
	for _, r := range tab.R16 {
		for c := rune(r.Lo); c <= rune(r.Hi); c += rune(r.Stride) {
			f(c)
		}
	}
	for _, r := range tab.R32 {
		for c := rune(r.Lo); c <= rune(r.Hi); c += rune(r.Stride) {
			f(c)
		}
	}
}
