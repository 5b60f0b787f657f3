// Package clients holds the clients: the Go client (go/, a module of its
// own) and those in other languages (python/ and typescript/). Its Go
// tests run their suites, the others' against the real server, so the
// README's `go test ./...` covers them.
package clients

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/resourcetest"
)

// build builds the command pkg into a temporary directory.
func build(t *testing.T, pkg string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds binaries and runs another language's suite; skipped in -short mode")
	}
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// need finds tool on PATH. Missing, it fails the test in CI (a missing
// install step must not pass as a skip) and skips it, visibly, elsewhere.
func need(t *testing.T, tool string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed: the other-language client suite cannot run (CI=%s)", tool, os.Getenv("CI"))
	}
	t.Skipf("SKIPPED: %s is not installed, so its client suite did not run", tool)
	return ""
}

// firstLine is out's first non-empty line, for a one-line reason.
func firstLine(out []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line)
}

// fenceEnv starts what the suites' fencing kit tests write to: a
// PostgreSQL and a Redis server, and an HTTP service behind the Go
// middleware; their addresses go to the suite in its environment.
func fenceEnv(t *testing.T) []string {
	t.Helper()
	pg := resourcetest.StartPostgres(t)
	rs := resourcetest.StartRedis(t)
	return []string{
		"BATON_TEST_POSTGRES=" + pg.Addr(), "BATON_TEST_POSTGRES_USER=" + pg.User, "BATON_TEST_POSTGRES_DB=" + pg.Database,
		"BATON_TEST_POSTGRES_URL=" + pg.DSN(),
		"BATON_TEST_REDIS=" + rs.Addr,
		"BATON_FENCEDCOUNTER_BIN=" + build(t, "github.com/batonlock/baton/internal/resourcetest/cmd/fencedcounter"),
	}
}

// TestGoClient runs the Go client's own tests (go test ./... in go/, with
// -race and -short when this run has them): the client is a module of its
// own, so that a user's build gets nothing of the server, and the ./... of
// the server's module does not reach it.
func TestGoClient(t *testing.T) {
	goTool := need(t, "go")
	args := []string{"test", "-count=1"}
	if raceEnabled {
		args = append(args, "-race")
	}
	if testing.Short() {
		args = append(args, "-short")
	}
	if deadline, ok := t.Deadline(); ok {
		// Leave this test time to report the suite's output.
		args = append(args, "-timeout="+max(time.Until(deadline)-10*time.Second, time.Second).Round(time.Second).String())
	}
	args = append(args, "./...")
	cmd := exec.Command(goTool, args...)
	cmd.Dir = "go"
	out, err := cmd.CombinedOutput()
	t.Logf("go %s (clients/go):\n%s", strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("the Go client's suite failed: %v", err)
	}
}

// TestPythonClient runs the Python client's unittest suite against the real
// server.
func TestPythonClient(t *testing.T) {
	py := need(t, "python3")
	bin := build(t, "github.com/batonlock/baton/cmd/baton")
	proxy := build(t, "github.com/batonlock/baton/internal/faultproxy/cmd/faultproxy")
	cmd := exec.Command(py, "-m", "unittest", "discover", "-s", "tests", "-v")
	cmd.Dir = "python"
	cmd.Env = append(os.Environ(), "BATON_BIN="+bin, "BATON_FAULTPROXY_BIN="+proxy, "PYTHONDONTWRITEBYTECODE=1")
	cmd.Env = append(cmd.Env, fenceEnv(t)...)
	out, err := cmd.CombinedOutput()
	t.Logf("python3 -m unittest (clients/python):\n%s", out)
	if err != nil {
		t.Fatalf("the Python client's suite failed: %v", err)
	}
	if !strings.Contains(string(out), "\nOK") {
		t.Fatalf("the Python client's suite did not end with OK")
	}
}

// TestTypeScriptClient runs the TypeScript client's node --test suite
// against the real server, after `npm ci` when its dependencies (the
// compiler) are not installed yet.
func TestTypeScriptClient(t *testing.T) {
	need(t, "node")
	npm := need(t, "npm")
	bin := build(t, "github.com/batonlock/baton/cmd/baton")
	proxy := build(t, "github.com/batonlock/baton/internal/faultproxy/cmd/faultproxy")
	if _, err := os.Stat(filepath.Join("typescript", "node_modules", "typescript")); err != nil {
		ci := exec.Command(npm, "ci", "--no-audit", "--no-fund")
		ci.Dir = "typescript"
		if out, err := ci.CombinedOutput(); err != nil {
			// npm ci needs the npm registry (the compiler is a dev
			// dependency): without it, outside CI, the suite is skipped.
			if os.Getenv("CI") != "" {
				t.Fatalf("npm ci (clients/typescript): %v\n%s", err, out)
			}
			t.Skipf("SKIPPED: npm ci could not install the TypeScript client's dependencies (it needs the npm registry), so its suite did not run: %v: %s", err, firstLine(out))
		}
	}
	cmd := exec.Command(npm, "test")
	cmd.Dir = "typescript"
	cmd.Env = append(os.Environ(), "BATON_BIN="+bin, "BATON_FAULTPROXY_BIN="+proxy)
	cmd.Env = append(cmd.Env, fenceEnv(t)...)
	out, err := cmd.CombinedOutput()
	t.Logf("npm test (clients/typescript):\n%s", out)
	if err != nil {
		t.Fatalf("the TypeScript client's suite failed: %v", err)
	}
	if !strings.Contains(string(out), "# fail 0") {
		t.Fatalf("the TypeScript client's suite did not report 0 failures")
	}
}
