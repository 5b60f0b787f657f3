//go:build !linux

package floor

import (
	"errors"
	"time"
)

// processCPU is Linux's only; elsewhere cpu falls back to /proc, which
// the bench needs anyway.
func processCPU(int) (time.Duration, error) {
	return 0, errors.New("no process CPU clock on this platform")
}
