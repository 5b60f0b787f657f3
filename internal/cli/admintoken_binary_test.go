package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBinaryAdminTokenStrength: the real binary refuses an admin token
// shorter than 32 characters (one line, exit 1, nothing bound), and warns,
// naming the mode, when the token's file may be read by users other than
// its owner; a long token in a private file starts without a warning.
func TestBinaryAdminTokenStrength(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	long := strings.Repeat("0123456789abcdef", 2) // 32 characters: the least accepted

	t.Run("short", func(t *testing.T) {
		t.Parallel()
		for _, tok := range []string{"x", strings.Repeat("a", 31), " " + strings.Repeat("b", 31) + "\n"} {
			file := write("short-"+time.Now().Format("150405.000000000"), tok, 0o600)
			cmd := batonCmd(t, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-admin-token-file", file)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("token of %d characters: baton serve still runs after 10 s, want exit 1; log:\n%s", len(strings.TrimSpace(tok)), stderr.String())
			}
			code := cmd.ProcessState.ExitCode()
			want := "holds a token of " + strconv.Itoa(len(strings.TrimSpace(tok))) + " characters; it must have at least 32"
			if l := lines(stderr.String()); code != 1 || len(l) != 1 || !strings.HasPrefix(l[0], "baton serve: admin-token-file "+file) || !strings.Contains(l[0], want) {
				t.Errorf("token of %d characters: exit %d, stderr %q; want 1 and one line with %q", len(strings.TrimSpace(tok)), code, stderr.String(), want)
			}
			if _, err := os.Stat(filepath.Join(cmd.Dir, "baton-data")); !os.IsNotExist(err) {
				t.Errorf("baton-data exists after the refused token (stat: %v)", err)
			}
		}
	})

	for _, tt := range []struct {
		name string
		mode os.FileMode
		warn bool
	}{
		{"world-readable", 0o644, true},
		{"group-readable", 0o640, true},
		{"private", 0o600, false},
		{"read-only", 0o400, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file := write("token-"+tt.name, long+"\n", tt.mode)
			cmd := batonCmd(t, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-admin-token-file", file, "-log-format=json")
			l := startLogged(t, cmd)
			var warned map[string]any
			for {
				s, ok := l.next()
				if !ok {
					t.Fatalf("no \"baton serving\" line; log:\n%s", strings.Join(l.seen, "\n"))
				}
				var m map[string]any
				if json.Unmarshal([]byte(s), &m) != nil {
					continue
				}
				if strings.HasPrefix(m["msg"].(string), "admin-token-file") {
					warned = m
				}
				if m["msg"] == "baton serving" {
					break
				}
			}
			switch {
			case tt.warn && warned == nil:
				t.Errorf("token file of mode %#o: no warning before \"baton serving\"; log:\n%s", tt.mode, strings.Join(l.seen, "\n"))
			case tt.warn && (warned["level"] != "WARN" || warned["mode"] != fmt.Sprintf("%#o", tt.mode) || warned["file"] != file):
				t.Errorf("token file of mode %#o: warning %v; want level WARN, mode %#o and the file", tt.mode, warned, tt.mode)
			case !tt.warn && warned != nil:
				t.Errorf("token file of mode %#o: warned %v, want no warning", tt.mode, warned)
			}
		})
	}
}
