package server

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ownFDs is how many spare descriptors the server keeps for its own files,
// which no session ever gets (see fdReserve): recording a longer lease in
// the data directory takes two (its new file and the directory's sync).
const ownFDs = 4

// fdReserve holds spare descriptors (Config.ReserveFDs) for the protocol
// listener, and ownFDs more for the server's own files. When an accept
// fails because the process has no descriptor free, a spare of the
// listener's is closed and the accept tried again at once, so that lock
// sessions are still admitted while something else (idle ops connections,
// a burst of files) holds every other one. The listener's spares are taken
// again after later accepts, one at a time, as descriptors free up.
//
// When the listener's spares are spent too, a new session is refused at
// the door: one of the server's own spares is lent to accept it, and it is
// closed at once (refuse). The server's own spares are never given to a
// session: a lease that must be recorded before its grant (Config.Leases)
// and finds no descriptor free is recorded with them (withOwn), so that a
// flood of sessions cannot make the server fail its own writes.
type fdReserve struct {
	want  int
	short atomic.Bool // fewer spares than wanted: accepts try to take one
	mu    sync.Mutex
	spare []*os.File // the listener's
	own   []*os.File // the server's own files'
	// gate is held for reading by the raw accept loop around each accept
	// (accept_raw_linux.go), and for writing while the server's own spares are
	// lent out: what they free is for the server's write, not for a
	// connection that happens to arrive meanwhile.
	gate sync.RWMutex
}

func (r *fdReserve) init(want int) {
	r.want = want
	r.short.Store(true)
	r.refill()
}

// refill opens spares up to what is wanted, the server's own first,
// stopping at the first that fails (no descriptor is free: a later accept
// tries again).
func (r *fdReserve) refill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refillLocked()
}

func (r *fdReserve) refillLocked() {
	for len(r.own) < ownFDs {
		f, err := os.Open(os.DevNull)
		if err != nil {
			r.short.Store(true)
			return
		}
		r.own = append(r.own, f)
	}
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

// outOfFDs reports whether err says that the process (or the system) has
// no descriptor free.
func outOfFDs(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// spend closes a spare of the listener's for an accept that err, its
// failure, says ran out of descriptors; false if err is another failure or
// no spare is left.
func (r *fdReserve) spend(err error) bool {
	if !outOfFDs(err) {
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

// withOwn runs f with n of the server's own spares closed, so that what f
// opens finds them free, and takes them again after it. It reports false,
// without running f, when the server has none left to lend.
func (r *fdReserve) withOwn(n int, f func()) bool {
	r.gate.Lock()
	defer r.gate.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	n = min(n, len(r.own))
	if n == 0 {
		return false
	}
	for _, sp := range r.own[len(r.own)-n:] {
		sp.Close()
	}
	r.own = r.own[:len(r.own)-n]
	f()
	r.refillLocked()
	return true
}

// close gives every spare back, at shutdown.
func (r *fdReserve) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range append(r.spare, r.own...) {
		f.Close()
	}
	r.spare, r.own, r.want = nil, nil, 0
	r.short.Store(false)
}

// refuseAtDoor refuses one session while the process has no descriptor
// free but the server's own: accept takes a waiting connection with one of
// them lent, and closes it at once; then the spare is taken again. It
// reports whether a connection was refused, and whether a spare could be
// lent (when it was, and none was refused, none was waiting).
func (s *Server) refuseAtDoor(accept func() bool) (refused, lent bool) {
	lent = s.fds.withOwn(1, func() { refused = accept() })
	if refused {
		s.m.refusedFDs.Inc()
		s.sec.refusals.Warn(s.log, "session refused at the door: no file descriptor is free but those the server keeps for its own files",
			"open_file_limit", FileLimit())
	}
	return refused, lent
}

// noteLease notes lease with Config.Leases (or the Replica), which records
// it in the data directory when it is longer than every lease before it:
// when that finds no descriptor free, it is done again with the server's
// own spares.
func (s *Server) noteLease(lease time.Duration) error {
	noter := s.cfg.leaseNoter()
	err := noter.NoteLease(lease)
	if err != nil && outOfFDs(err) {
		s.fds.withOwn(ownFDs, func() { err = noter.NoteLease(lease) })
	}
	return err
}
