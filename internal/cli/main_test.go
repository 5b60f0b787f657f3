package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/supervise"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// A baton run started in-process starts this binary as its watchdog.
	if len(os.Args) > 1 && os.Args[1] == supervise.WatchdogArg {
		os.Exit(supervise.RunWatchdog(os.Args[2:]))
	}
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// fakeEnv is an environment of exactly the variables given.
func fakeEnv(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// runCLI runs the command line in-process with environment env and
// returns its exit code and output. Its context is cancelled from the
// start: it is for commands that should fail, and a serve that starts
// anyway stops again at once instead of hanging the test.
func runCLI(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut batontest.SyncBuffer
	code = run(ctx, args, &sys{stdout: &out, stderr: &errOut, lookupEnv: fakeEnv(env)})
	return code, out.String(), errOut.String()
}

// lines splits output into its lines, without the empty one after the last
// newline.
func lines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
