package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWeakAdminTokenWarned: a token of 32 characters that repeats a few
// (32 "a"s) is accepted, but the server says it can be guessed; 32 random
// hex digits are not warned about. A token file in a directory that others
// may write is warned about too: they can replace the token.
func TestWeakAdminTokenWarned(t *testing.T) {
	if n := distinctRunes(strings.Repeat("a", 32)); n >= minTokenDistinct {
		t.Errorf("32 a's: %d distinct characters, want fewer than %d (warned)", n, minTokenDistinct)
	}
	if n := distinctRunes("3f9c1e07b2d84a65c0e1f7a9b3d25c48"); n < minTokenDistinct {
		t.Errorf("a random hex token: %d distinct characters, want at least %d (not warned)", n, minTokenDistinct)
	}
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if !othersMayReplace(open) {
		t.Error("a directory of mode 0777: others may not replace its files, want they may")
	}
	if othersMayReplace(private) {
		t.Error("a directory of mode 0700: others may replace its files, want they may not")
	}
}
