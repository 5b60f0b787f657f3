package batonsys

import (
	"fmt"
	"syscall"
	"time"
	"unsafe"
)

// processCPU is the CPU time (user + system) of process pid so far, in
// nanoseconds, from its process-wide CPU clock (clock_getcpuclockid(3):
// MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)). /proc/PID/stat counts in
// 10 ms ticks, too coarse for the short windows of a smoke run (a second
// of handovers costs a server a few milliseconds).
func processCPU(pid int) (time.Duration, error) {
	clock := (^uintptr(pid))<<3 | 2
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clock, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0, fmt.Errorf("CPU clock of pid %d: %w", pid, e)
	}
	return time.Duration(ts.Nano()), nil
}
