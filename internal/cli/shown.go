package cli

import (
	"fmt"
	"strings"

	"github.com/batonlock/baton/internal/hidden"
)

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
	if !hidden.Has(s) {
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
			hidden.WriteRune(&b, r)
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
