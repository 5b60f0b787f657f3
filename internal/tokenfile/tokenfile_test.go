package tokenfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadAdminToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tok, err := Read(write("token", "  s3cret\n\n"))
	if err != nil || tok != "s3cret" {
		t.Errorf("Read = %q, %v; want \"s3cret\", nil", tok, err)
	}
	for _, tt := range []struct{ name, file, want string }{
		{"missing", filepath.Join(dir, "missing"), "no such file or directory"},
		{"empty", write("empty", ""), "is empty"},
		{"blank", write("blank", " \n\t\n"), "is empty"},
		{"directory", dir, "admin-token-file"},
	} {
		if _, err := Read(tt.file); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Read error %v, want one with %q", tt.name, err, tt.want)
		}
	}
}

// TestWeakAdminTokenWarned: a token of 32 characters that repeats a few
// (32 "a"s) is accepted, but the server says it can be guessed; 32 random
// hex digits are not warned about. A token file in a directory that others
// may write is warned about too: they can replace the token.
func TestWeakAdminTokenWarned(t *testing.T) {
	if n := Distinct(strings.Repeat("a", 32)); n >= MinDistinct {
		t.Errorf("32 a's: %d distinct characters, want fewer than %d (warned)", n, MinDistinct)
	}
	if n := Distinct("3f9c1e07b2d84a65c0e1f7a9b3d25c48"); n < MinDistinct {
		t.Errorf("a random hex token: %d distinct characters, want at least %d (not warned)", n, MinDistinct)
	}
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if !OthersMayReplace(open) {
		t.Error("a directory of mode 0777: others may not replace its files, want they may")
	}
	if OthersMayReplace(private) {
		t.Error("a directory of mode 0700: others may replace its files, want they may not")
	}
}
