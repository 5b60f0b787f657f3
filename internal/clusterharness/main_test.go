package clusterharness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// The fault tests run only when BATON_CLUSTER_FAULTS is set (to anything
// but 0): they take minutes and want root for network namespaces, so a
// plain `go test ./...` skips them, saying so; .ci/clusterfaults.sh sets it.
// BATON_CLUSTER_SCHEDULE=long runs many windows of each fault instead of
// one (BATON_CLUSTER_ROUNDS sets how many; 20 by default, about 12 minutes).
const gateVar = "BATON_CLUSTER_FAULTS"

// batonBin is the normal build, faultBin the faultinject build (with the
// test-only grace knob); both empty when the fault tests do not run, and
// skipReason says why.
var batonBin, faultBin, skipReason string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	goTool, lookErr := exec.LookPath("go")
	switch v := os.Getenv(gateVar); {
	case v == "" || v == "0":
		skipReason = "cluster fault harness: set " + gateVar + "=1 to run it (.ci/clusterfaults.sh does, as root with network namespaces)"
	case lookErr != nil:
		skipReason = fmt.Sprintf("no go tool to build the binary: %v", lookErr)
	default:
		dir, err := os.MkdirTemp("", "baton-clusterharness-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		for _, b := range []struct {
			out  *string
			name string
			tags []string
		}{{&batonBin, "baton", nil}, {&faultBin, "baton-faultinject", []string{"-tags", "faultinject"}}} {
			path := filepath.Join(dir, b.name)
			args := append(append([]string{"build"}, b.tags...), "-o", path, "github.com/batonlock/baton/cmd/baton")
			if out, err := exec.Command(goTool, args...).CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "go %v: %v\n%s", args, err, out)
				return 1
			}
			*b.out = path
		}
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	return code
}

// needFaults skips the test unless the fault tests run.
func needFaults(t *testing.T) {
	t.Helper()
	if batonBin == "" {
		t.Skip(skipReason)
	}
}
