package batonsys

import (
	"os"
	"testing"
)

// TestProcessCPU: the CPU clock agrees with /proc and moves with work.
func TestProcessCPU(t *testing.T) {
	pid := os.Getpid()
	a, err := processCPU(pid)
	if err != nil {
		t.Skipf("no process CPU clock here: %v", err)
	}
	x := 0
	for i := range 20_000_000 {
		x ^= i
	}
	_ = x
	b, err := processCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	if b <= a {
		t.Errorf("CPU clock %v then %v after work", a, b)
	}
	u, err := readProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	// /proc counts whole ticks of 10 ms, read a little later.
	if d := b - u.CPU; d < -50e6 || d > 50e6 {
		t.Errorf("CPU clock %v, /proc %v", b, u.CPU)
	}
	if c, err := ProcessCPU(pid); err != nil || c < b {
		t.Errorf("ProcessCPU %v, %v after the clock's %v", c, err, b)
	}
}
