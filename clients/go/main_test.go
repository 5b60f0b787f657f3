package baton_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMain runs the tests and fails the package if any leaves a goroutine of
// the client behind: every goroutine a lock starts must end when the lock
// ends. The module requires nothing, so the check is the few lines of
// leakedGoroutines rather than goleak. When the module is not inside the
// Baton repository, there is no server to build, and the examples, which
// run against the real one, are skipped with a message.
func TestMain(m *testing.M) {
	flag.Parse()
	if why := serverSourceMissing(); why != "" {
		fmt.Fprintf(os.Stderr, "SKIPPED: the examples run against the baton server built from this repository's cmd/baton: %s\n", why)
		skip := "^Example"
		if old := flag.Lookup("test.skip").Value.String(); old != "" {
			skip = old + "|" + skip
		}
		flag.Set("test.skip", skip)
	}
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(10 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines of the client outlived the tests:\n%s\n", leaked)
			code = 1
		}
	}
	if exampleServerDir != "" {
		os.RemoveAll(exampleServerDir)
	}
	os.Exit(code)
}

// repoRoot is where the server's module is when this module sits in the
// Baton repository as clients/go.
const repoRoot = "../.."

// serverSourceMissing says why the server cannot be built from here, or "".
func serverSourceMissing() string {
	mod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil || !bytes.HasPrefix(mod, []byte("module github.com/batonlock/baton\n")) {
		return "this module is not inside the Baton repository (no ../../go.mod of github.com/batonlock/baton)"
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "cmd", "baton")); err != nil {
		return fmt.Sprintf("no server source: %v", err)
	}
	if _, err := exec.LookPath("go"); err != nil {
		return fmt.Sprintf("no go tool to build it: %v", err)
	}
	return ""
}

var (
	buildServerOnce  sync.Once
	exampleServerDir string // holds the binary and the servers' data; removed by TestMain
	serverBinary     string
	serverBuildErr   error
)

// buildServer builds cmd/baton once, for every example of the run.
func buildServer() (string, error) {
	buildServerOnce.Do(func() {
		exampleServerDir, serverBuildErr = os.MkdirTemp("", "baton-examples-")
		if serverBuildErr != nil {
			return
		}
		bin := filepath.Join(exampleServerDir, "baton")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/baton")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			serverBuildErr = fmt.Errorf("go build ./cmd/baton in %s: %v\n%s", repoRoot, err, out)
			return
		}
		serverBinary = bin
	})
	return serverBinary, serverBuildErr
}

// leakedGoroutines waits up to within for every goroutine but this one that
// runs or was started by code of this module to end, and returns the
// stacks of those still there.
func leakedGoroutines(within time.Duration) string {
	const ours = "github.com/batonlock/baton/clients/go"
	deadline := time.Now().Add(within)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for i, g := range strings.Split(string(buf), "\n\n") {
			if i > 0 && strings.Contains(g, ours) { // the first is this goroutine
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
