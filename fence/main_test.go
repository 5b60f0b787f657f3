package fence_test

import (
	"os"
	"testing"
)

// TestMain runs the package's tests, or, started by one of them with
// BATON_FENCE_CHILD set, a lock holder (child_test.go).
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}
