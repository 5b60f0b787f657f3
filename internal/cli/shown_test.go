package cli

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/batonlock/baton/internal/hidden"
)

// TestBinaryLocksShowsInvisibleCharacters: the real baton locks, against
// the real server, prints a name and an owner made of look-alikes (the
// zero-width characters, the BOM, the soft hyphen, the grapheme joiner, a
// Hangul filler, a tag, a variation selector, a no-break space) with each
// written as its escape, as the dashboard shows it, and none raw.
func TestBinaryLocksShowsInvisibleCharacters(t *testing.T) {
	t.Parallel()
	const name = "jobs/\u200b\u200c\u200d\u2060\ufeff\u00ad\u034f\u3164\U000E0041\ufe0fx"
	const owner = "ci\u00a0runner\u200b-1"
	cmd := batonCmd(t, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-log-format=json")
	l := startLogged(t, cmd)
	sl := waitServing(t, l.next)
	holdLock(t, sl.Addr, name, owner)
	for _, args := range [][]string{{"locks"}, {"locks", name}} {
		out, err := batonCmd(t, append(args, "-ops-addr", sl.OpsAddr)...).CombinedOutput()
		if err != nil {
			t.Fatalf("baton %s: %v\n%s", args[0], err, out)
		}
		if i := strings.IndexFunc(string(out), func(r rune) bool { return r != '\n' && hidden.Rune(r) }); i >= 0 {
			r, _ := utf8.DecodeRune(out[i:])
			t.Errorf("baton %q printed U+%04X raw:\n%q", args, r, out)
		}
		for _, want := range []string{`jobs/\u200B\u200C\u200D\u2060\uFEFF\u00AD\u034F\u3164\U000E0041\uFE0Fx`, `ci\u00A0runner\u200B-1`} {
			if !strings.Contains(string(out), want) {
				t.Errorf("baton %q: output lacks %s:\n%s", args, want, out)
			}
		}
	}
}
