package server

import (
	"time"

	"golang.org/x/sys/unix"
)

// sleepPrecisely sleeps for d (at most timerSlack) with nanosleep, which
// the kernel ends within its timer slack (50 µs by default) rather than at
// the next millisecond. The goroutine holds its thread meanwhile, for at
// most a millisecond, and only when a lease is about to end.
func sleepPrecisely(d time.Duration) {
	if d <= 0 {
		return
	}
	ts := unix.NsecToTimespec(d.Nanoseconds())
	for {
		var rem unix.Timespec
		if err := unix.Nanosleep(&ts, &rem); err != unix.EINTR {
			return
		}
		ts = rem
	}
}
