package server

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// fdReserve holds spare descriptors for the protocol listener
// (Config.ReserveFDs). When an accept fails because the process has no
// descriptor free, a spare is closed and the accept tried again at once, so
// that lock sessions are still admitted while something else (idle ops
// connections, a burst of files) holds every other descriptor. Spares are
// taken again after later accepts, one at a time, as descriptors free up.
type fdReserve struct {
	want  int
	short atomic.Bool // fewer spares than want: accepts try to take one
	mu    sync.Mutex
	spare []*os.File
}

func (r *fdReserve) init(want int) {
	r.want = want
	r.short.Store(want > 0)
	r.refill()
}

// refill opens spares up to want, stopping at the first that fails (no
// descriptor is free: a later accept tries again).
func (r *fdReserve) refill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.spare) < r.want {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		r.spare = append(r.spare, f)
	}
	r.short.Store(len(r.spare) < r.want)
}

// topUp is the accept loop's refill after a successful accept: nothing
// when the reserve is whole (one atomic load).
func (r *fdReserve) topUp() {
	if r.short.Load() {
		r.refill()
	}
}

// spend closes a spare for an accept that err, its failure, says ran out
// of descriptors; false if err is another failure or no spare is left.
func (r *fdReserve) spend(err error) bool {
	if !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.spare)
	if n == 0 {
		return false
	}
	r.spare[n-1].Close()
	r.spare = r.spare[:n-1]
	r.short.Store(true)
	return true
}

// close gives every spare back, at shutdown.
func (r *fdReserve) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.spare {
		f.Close()
	}
	r.spare, r.want = nil, 0
	r.short.Store(false)
}
