package cli

import (
	"fmt"
	"strings"
	"unicode"
)

// hiddenRune reports a rune that a terminal would not show as itself:
// controls (C0, DEL, C1), format characters (bidi overrides and
// isolates, zero-width ones) and line or paragraph separators. The
// protocol refuses only bytes below 0x20 and 0x7F, so names and owners
// can carry the rest; printed raw, a right-to-left override in one
// holder's owner could reorder its row's SESSION and TOKEN columns.
func hiddenRune(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) || r == unicode.ReplacementChar
}

// shown is s with each hidden rune written as its escape (\u202e), the
// way the dashboard shows them.
func shown(s string) string {
	if strings.IndexFunc(s, hiddenRune) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		writeShown(&b, r)
	}
	return b.String()
}

func writeShown(b *strings.Builder, r rune) {
	switch {
	case !hiddenRune(r):
		b.WriteRune(r)
	case r > 0xFFFF:
		fmt.Fprintf(b, `\U%08x`, r)
	default:
		fmt.Fprintf(b, `\u%04x`, r)
	}
}

// shellQuote quotes s for a POSIX shell when it needs it, so that a
// command printed for the user can be pasted as it is. A name with hidden
// runes gets $'...' quoting (bash, zsh, ksh), with each written as its
// escape.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-:@%+=,", r))
	}) < 0 {
		return s
	}
	if strings.IndexFunc(s, hiddenRune) < 0 {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteString("$'")
	for _, r := range s {
		switch r {
		case '\'', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			writeShown(&b, r)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// plural is n with the singular or plural noun after it.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
