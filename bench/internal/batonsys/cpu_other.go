//go:build !linux

package batonsys

import (
	"errors"
	"time"
)

// processCPU is Linux's only; elsewhere ProcessCPU falls back to /proc,
// which the bench needs anyway.
func processCPU(int) (time.Duration, error) {
	return 0, errors.New("no process CPU clock on this platform")
}
