package baton

import (
	"sync/atomic"
	"time"
)

// suspendClock is a Client's clock for tests inside synctest.Test, where
// package clock's reading (the real CLOCK_BOOTTIME) does not follow the
// bubble's fake time: it is the fake time, which Go's monotonic clock and
// every timer count, plus the suspends of the machine that the test
// makes, which they do not.
type suspendClock struct {
	// stops makes it a clock that stops during a suspend, as the monotonic
	// clock does: a test's control, which must see the harm.
	stops bool
	slept atomic.Int64 // the suspends so far
}

func (c *suspendClock) now() time.Time {
	if c.stops {
		return time.Now()
	}
	return time.Now().Add(time.Duration(c.slept.Load()))
}

// suspend makes the machine sleep for d, as far as the clock can tell:
// its reading moves d on at once, while time.Now and the timers do not.
func (c *suspendClock) suspend(d time.Duration) { c.slept.Add(int64(d)) }
