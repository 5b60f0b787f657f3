package baton

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: every
// goroutine a lock starts must end when the lock ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
