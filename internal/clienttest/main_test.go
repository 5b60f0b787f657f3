package clienttest

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: every
// goroutine a lock starts must end when the lock ends. Run with
// pausedHolderEnv set, the binary is instead the child process of
// TestPausedHolder.
func TestMain(m *testing.M) {
	if addr := os.Getenv(pausedHolderEnv); addr != "" {
		os.Exit(pausedHolder(addr, os.Getenv(pausedHolderMode)))
	}
	goleak.VerifyTestMain(m)
}
