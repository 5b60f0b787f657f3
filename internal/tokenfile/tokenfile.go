// Package tokenfile reads the ops API's admin token from its file, for
// the server and the operator commands alike (the whitespace around it
// trimmed), refuses a token too short for the server, and tells the
// signs of one others could guess, read or replace. Its errors name
// -admin-token-file.
package tokenfile

import (
	"fmt"
	"os"
	"strings"
	"unicode/utf8"
)

// Read reads the bearer token from file, without the whitespace
// around it.
func Read(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("admin-token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("admin-token-file %s is empty", file)
	}
	return tok, nil
}

// MinLen is the fewest characters the server's admin token may
// have: 32 random characters (openssl rand -hex 16 and longer) cannot be
// guessed through the ops API, a short word can.
const MinLen = 32

// MinDistinct is the fewest different characters an admin token has
// without a warning: 32 random hex digits have about 14, one repeated
// character or a word typed over and over has a handful.
const MinDistinct = 8

// Distinct counts the different characters of s.
func Distinct(s string) int {
	seen := map[rune]bool{}
	for _, r := range s {
		seen[r] = true
	}
	return len(seen)
}

// OthersMayReplace reports whether users other than dir's owner may
// replace the files in it: it is writable by group or others, and not
// sticky (as /tmp is, where only a file's owner may replace it).
func OthersMayReplace(dir string) bool {
	fi, err := os.Stat(dir)
	if err != nil {
		return false
	}
	return fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0
}

// ReadServer reads the server's admin token from file (see
// Read) and refuses one shorter than MinLen.
// perm is the file's permission bits, for the warning (once the logger
// exists) when users other than its owner may read or write it.
func ReadServer(file string) (tok string, perm os.FileMode, err error) {
	if tok, err = Read(file); err != nil {
		return "", 0, err
	}
	if n := utf8.RuneCountInString(tok); n < MinLen {
		return "", 0, fmt.Errorf("admin-token-file %s holds a token of %d characters; it must have at least %d (make one with: openssl rand -hex 32)", file, n, MinLen)
	}
	if fi, err := os.Stat(file); err == nil {
		perm = fi.Mode().Perm()
	}
	return tok, perm, nil
}
