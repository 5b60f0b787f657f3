package clienttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	baton "github.com/batonlock/baton/clients/go"
)

// The child process of TestPausedHolder (pause_unix_test.go): the test
// binary run again with pausedHolderEnv set, so that TestMain runs
// pausedHolder instead of the tests.
const (
	pausedHolderEnv  = "BATON_TEST_PAUSED_HOLDER"      // the server's address
	pausedHolderMode = "BATON_TEST_PAUSED_HOLDER_MODE" // also the lock's name
	// pausedLease is long enough that the holder, one thread under the
	// race detector, keeps its lock on a loaded machine until it is
	// stopped (with 1 s, its heartbeats went unconfirmed for 0.8 s beside
	// the whole suite, and the waiter was granted before the pause).
	pausedLease = 3 * time.Second
	// pauseThreshold is a gap between two checks that counts as the pause:
	// far above what a loaded machine steals from a running process, below
	// the lease that the parent's SIGSTOP outlasts.
	pauseThreshold = pausedLease / 2
	// pausedRounds is how many times the holder takes the lock and is
	// stopped: whether the goroutines of a client that reads no clock get
	// to run before the work's first check is up to the schedulers, so
	// one round alone could miss the fault.
	pausedRounds = 3
)

// pausedHolder takes the lock pausedRounds times. Each time it works in
// short busy steps, asking before each step whether it still holds the
// lock, the way the docs tell work to: mode "Lock.Err" asks l.Err(), mode
// "ctx.Err" the context Do passes. When a gap in its steps shows that the
// process was stopped, it prints the answer of the first question asked
// after the resume, and ends the round. A check whose own clock reading
// may predate the pause (the pause fell inside it) does not count: the
// next one is the first wholly after. It runs with GOMAXPROCS=1 (set by
// the parent), so that the client's goroutines run only when the work
// yields or is preempted, as on a busy machine.
func pausedHolder(addr, mode string) int {
	c, err := baton.New([]string{addr}, baton.WithLease(pausedLease), baton.WithOwner("paused-holder"))
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range pausedRounds {
		if err := pausedRound(ctx, c, mode); err != nil {
			fmt.Fprintln(os.Stderr, "Do:", err)
		}
	}
	return 0
}

func pausedRound(ctx context.Context, c *baton.Client, mode string) error {
	return c.Do(ctx, "paused/"+mode, func(ctx context.Context, l *baton.Lock) error {
		check := func() error {
			if mode == "ctx.Err" {
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				return nil
			}
			return l.Err()
		}
		prev := time.Now() // before the parent learns it may stop us
		fmt.Printf("held %d\n", l.Token())
		var paused time.Duration // a pause that fell inside the previous check
		for {
			start := time.Now()
			err := check()
			if gap := start.Sub(prev); gap >= pauseThreshold {
				paused = gap
			}
			switch inside := time.Since(start); {
			case paused > 0:
				// The first check after the resume.
				fmt.Printf("resumed after %v: lost=%v err=%v\n",
					paused.Round(time.Millisecond), errors.Is(err, baton.ErrLockLost), err)
				return nil
			case inside >= pauseThreshold:
				paused = inside // the next check is the first wholly after it
				prev = time.Now()
				continue
			case err != nil:
				fmt.Printf("lost without a pause (%v since the previous check): %v\n", start.Sub(prev), err)
				return nil
			}
			workSink += spin(200) // a short step of work
			prev = start
		}
	})
}

// workSink keeps the compiler from dropping spin's work.
var workSink uint64

func spin(n uint64) uint64 {
	var x uint64
	for i := range n {
		x += i * i
	}
	return x
}
