package cli

import (
	"strings"
	"testing"
)

func TestHelp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want []string // each must appear on stdout
	}{
		{[]string{"--help"}, []string{"Usage: baton <command>", "serve", "version", "help"}},
		{[]string{"-h"}, []string{"Usage: baton <command>"}},
		{[]string{"-help"}, []string{"Usage: baton <command>"}},
		{[]string{"help"}, []string{"Usage: baton <command>", "run the lock server in the foreground"}},
		{[]string{"help", "serve"}, []string{"Usage: baton serve [flags]", "-io-timeout", "(default 5s, $BATON_IO_TIMEOUT)",
			"-admin-token-file file", `(default "", $BATON_ADMIN_TOKEN_FILE)`, "(default 127.0.0.1:7071, $BATON_OPS_ADDR)",
			"-log-level level", "Examples:", "baton serve -ops-addr 0.0.0.0:7071 -admin-token-file"}},
		{[]string{"serve", "-h"}, []string{"Usage: baton serve [flags]", "-max-waiters"}},
		{[]string{"serve", "--help"}, []string{"Usage: baton serve [flags]"}},
		{[]string{"help", "version"}, []string{"Usage: baton version"}},
		{[]string{"help", "help"}, []string{"Usage: baton help [command]"}},
		{[]string{"help", "-h"}, []string{"Usage: baton help [command]"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI(t, nil, tt.args...)
			if code != 0 {
				t.Errorf("exit code %d, want 0", code)
			}
			if stderr != "" {
				t.Errorf("stderr %q, want nothing", stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
		})
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		code, stdout, stderr := runCLI(t, nil, args...)
		if code != 0 || stderr != "" {
			t.Fatalf("baton %q: exit code %d, stderr %q; want 0 and nothing", args, code, stderr)
		}
		if l := lines(stdout); len(l) != 1 || !strings.HasPrefix(l[0], "baton ") || !strings.Contains(l[0], " (commit ") || !strings.Contains(l[0], " go1.") {
			t.Errorf("baton %q: stdout %q, want one line \"baton VERSION (commit C) goX ...\"", args, stdout)
		}
	}
}

// TestUsageErrors covers the usage errors of baton itself; those of serve
// are in TestServeUsageErrors.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string // on the one stderr line
	}{
		{nil, "baton: no command given; run 'baton help'"},
		{[]string{"nope"}, `baton: unknown command "nope"; run 'baton help'`},
		{[]string{"-x"}, "baton: unknown flag -x"},
		{[]string{"--frobnicate"}, "baton: unknown flag --frobnicate"},
		{[]string{"help", "nope"}, `baton: unknown command "nope"; run 'baton help'`},
		{[]string{"help", "serve", "x"}, `baton help: unexpected argument "x"; run 'baton help help'`},
		{[]string{"version", "x"}, `baton version: unexpected argument "x"; run 'baton help version'`},
		{[]string{"version", "-x"}, "baton version: flag provided but not defined: -x; run 'baton help version'"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI(t, nil, tt.args...)
			if code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			if l := lines(stderr); len(l) != 1 || !strings.Contains(l[0], tt.want) {
				t.Errorf("stderr %q, want one line with %q", stderr, tt.want)
			}
		})
	}
}
