// Package clock reads the clock on which Baton measures every deadline
// that guards a lock: the client's deadline and maximum hold, the server's
// leases and grace periods, and a cluster leader's own lease.
//
// Go's monotonic clock, the one time.Now carries, stops while the machine
// is suspended on Linux (a laptop's lid, a virtual machine paused or
// restored from a snapshot), while the rest of the world goes on: a holder
// whose host slept past its lease would wake up believing it still holds a
// lock that the server has given to another. This clock counts a suspend:
// it is CLOCK_BOOTTIME on Linux. Where the platform offers no such clock
// to Go, it is the monotonic clock plus every jump of the wall clock ahead
// of it, which is what a suspend looks like from inside the process; a
// step of the wall clock then counts as a suspend too, which can only end
// a lock early, never late.
//
// Its readings have no monotonic reading and no relation to the wall
// clock: compare them, and subtract them, only with other readings of Now.
// Never mix them with time.Now(), which differs from them by every
// suspend since the machine started.
package clock

import (
	"sync"
	"time"
)

// Now returns the clock's reading: a time.Time whose origin is arbitrary
// (the machine's boot on Linux), never shown to a person.
func Now() time.Time { return time.Unix(0, int64(read())) }

// tolerance is how far the wall clock may move against the monotonic
// clock before the fallback (see package doc) counts it as a suspend: a
// suspend shorter than this can go unseen, and a step of the wall clock
// forward by more ends deadlines early by as much. It is above the jitter
// of reading the two clocks one after the other.
const tolerance = 2 * time.Millisecond

// wallChecked is the fallback clock of a platform without one that counts
// a suspend: the monotonic clock plus every jump of the wall clock ahead
// of it. The zero value is not ready; use newWallChecked.
type wallChecked struct {
	mu     sync.Mutex
	start  time.Time // the origin, with its monotonic reading
	origin int64     // start's wall clock, ns since the Unix epoch
	// ref is wall - monotonic (since start) after the last jump counted;
	// ahead is the sum of the jumps counted.
	ref, ahead time.Duration
}

// newWallChecked returns a fallback clock whose readings start at 0.
func newWallChecked() *wallChecked {
	start := time.Now()
	return &wallChecked{start: start, origin: start.UnixNano()}
}

// since returns the time since the clock's start, suspends included.
func (c *wallChecked) since() time.Duration {
	c.mu.Lock() // the reads too: a reading from before a jump, counted after it, would count it twice
	defer c.mu.Unlock()
	t := time.Now()
	return c.advance(time.Duration(t.UnixNano()-c.origin), t.Sub(c.start))
}

// advance takes one pair of readings since the start, wall and monotonic
// (mono), and returns the clock's reading. The wall clock running ahead of
// the monotonic one by more than tolerance since the last jump counted is
// a suspend (or a step forward: counted too, the safe side). Falling
// behind by more is a step back: the reference moves back with it,
// uncounted, so that a suspend after it is still seen whole. Changes
// within tolerance (reading jitter, a rate drift) move nothing, so they do
// not add up.
func (c *wallChecked) advance(wall, mono time.Duration) time.Duration {
	switch skew := wall - mono; {
	case skew > c.ref+tolerance:
		c.ahead += skew - c.ref
		c.ref = skew
	case skew < c.ref-tolerance:
		c.ref = skew
	}
	return mono + c.ahead
}
