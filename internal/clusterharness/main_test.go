package clusterharness

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/batonlock/baton/internal/proctest"
)

// The fault tests run only when BATON_CLUSTER_FAULTS is set (to anything
// but 0): they take minutes and want root for network namespaces, so a
// plain `go test ./...` skips them, saying so; .ci/clusterfaults.sh sets it.
// BATON_CLUSTER_SCHEDULE=long runs many rounds of the schedule instead of
// one (BATON_CLUSTER_ROUNDS sets how many; 18 by default, some 300 faults
// in about an hour).
// BATON_CLUSTER_NETNS=0 forces the loopback network; BATON_CLUSTER_LOGS=dir
// keeps every node's log there.
const gateVar = "BATON_CLUSTER_FAULTS"

// The binaries' paths, for a run of the test binary by one of its tests.
const (
	harnessBinVar      = "BATON_HARNESS_BIN"
	harnessFaultBinVar = "BATON_HARNESS_FAULT_BIN"
)

// batonBin is the normal build, faultBin the faultinject build (with the
// test-only mutation knobs); both empty when the fault tests do not run, and
// skipReason says why.
var batonBin, faultBin, skipReason string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	goTool, lookErr := exec.LookPath("go")
	switch v := os.Getenv(gateVar); {
	case v == "" || v == "0":
		skipReason = "cluster fault harness: set " + gateVar + "=1 to run it (.ci/clusterfaults.sh does, as root with network namespaces)"
	case runtime.GOOS != "linux":
		// The loopback fallback listens on 127.A.i.1, which only Linux
		// routes without configuration.
		skipReason = "cluster fault harness: Linux only (network namespaces, or loopback addresses beyond 127.0.0.1)"
	case lookErr != nil:
		skipReason = fmt.Sprintf("no go tool to build the binary: %v", lookErr)
	case os.Getenv(harnessBinVar) != "" && os.Getenv(harnessFaultBinVar) != "":
		// A run of the test binary by a test of its own (in a network
		// namespace) uses the binaries its parent built.
		batonBin, faultBin = os.Getenv(harnessBinVar), os.Getenv(harnessFaultBinVar)
	default:
		dir, err := os.MkdirTemp("", "baton-clusterharness-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if batonBin, err = proctest.BuildBaton(goTool, dir, "baton"); err == nil {
			faultBin, err = proctest.BuildBaton(goTool, dir, "baton-faultinject", "faultinject")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return proctest.RunChecked(m)
}

// needFaults skips the test unless the fault tests run.
func needFaults(t *testing.T) {
	t.Helper()
	if batonBin == "" {
		t.Skip(skipReason)
	}
}
