// Package human is how the command line writes for people: names and
// owners with their hidden runes escaped, durations as people read them,
// the server's grace, an error on one line, a name quoted for the shell. baton run's status and the
// operator commands share it, so that both say a thing the same way.
package human

import (
	"fmt"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/hidden"
)

// Escape is s with each rune that a terminal would not show as itself
// written as its escape (\u202E), by the rule the dashboard shows them by
// (internal/hidden). The protocol refuses only bytes below 0x20 and 0x7F,
// so names and owners can carry the rest; printed raw, a right-to-left
// override in one holder's owner could reorder its row's SESSION and TOKEN
// columns, and a zero-width space make two names look the same.
//
// The escapes stay one-to-one: a name that holds a hidden rune, or the
// text of an escape (a backslash and u or U), is written with each
// backslash doubled, so the name that is literally `a\u200Bb` never
// prints as the one with a real U+200B.
func Escape(s string) string {
	if !hidden.Has(s) && !strings.Contains(s, `\u`) && !strings.Contains(s, `\U`) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r == '\\' {
			b.WriteString(`\\`)
			continue
		}
		hidden.WriteRune(&b, r)
	}
	return b.String()
}

// Age formats a duration for people: 340ms, 4.2s, 12s, 4m12s, 3h4m.
func Age(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}

// Grace is the server's grace, ms milliseconds left, as people read it:
// "grace: grants resume in 8.8s".
func Grace(ms int64) string {
	return "grace: grants resume in " + Age(time.Duration(ms)*time.Millisecond)
}

// OneLine keeps an error message on one line whatever it wraps.
func OneLine(msg string) string {
	return strings.Join(strings.Fields(msg), " ")
}

// ShellQuote quotes s for a POSIX shell when it needs it, so that a
// command printed for the user can be pasted as it is. A name with hidden
// runes gets $'...' quoting (bash, zsh, ksh), with each written as its
// escape.
func ShellQuote(s string) string {
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

// Plural is n with the singular or plural noun after it.
func Plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
