package baton_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/server"
)

// Do is the usual way to hold a lock: the work runs while the lock is held,
// and its context ends the moment ownership is no longer confirmed.
func ExampleClient_Do() {
	addr, stop := exampleServer()
	defer stop()

	c, err := baton.New([]string{addr}, baton.WithLease(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	err = c.Do(ctx, "jobs/nightly", func(ctx context.Context, l *baton.Lock) error {
		fmt.Println("running the nightly job with token", l.Token())
		// Long work checks ctx, and stops when it ends:
		// context.Cause(ctx) then wraps baton.ErrLockLost.
		return ctx.Err()
	})
	if errors.Is(err, baton.ErrLockLost) {
		fmt.Println("the lock was lost during the job:", err)
	} else if err != nil {
		log.Fatal(err)
	}
	// Output: running the nightly job with token 1
}

// Acquire suits callers that cannot put the work in a callback. Release is
// the caller's; its error says whether the lock was held until then.
func ExampleClient_Acquire() {
	addr, stop := exampleServer()
	defer stop()

	c, err := baton.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	// ctx bounds the wait in the queue, not the lock.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "reports/daily")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", l.Name(), "with token", l.Token())

	select {
	case <-l.Done():
		fmt.Println("lost:", l.Err())
	case <-time.After(100 * time.Millisecond): // the work
	}
	if err := l.Release(); err != nil {
		fmt.Println("the work ran partly without the lock:", err)
	}
	fmt.Println("released:", l.Err())
	// Output:
	// holding reports/daily with token 1
	// released: lock released
}

// A try-lock fails at once with ErrBusy if someone holds the lock.
func ExampleWithNoWait() {
	addr, stop := exampleServer()
	defer stop()

	c, err := baton.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	held, err := c.Acquire(ctx, "cache/rebuild")
	if err != nil {
		log.Fatal(err)
	}
	defer held.Release()

	_, err = c.Acquire(ctx, "cache/rebuild", baton.WithNoWait(true))
	fmt.Println(errors.Is(err, baton.ErrBusy))
	fmt.Println(err)
	// Output:
	// true
	// acquire "cache/rebuild": BUSY: lock "cache/rebuild" is held
}

// store is a resource that fences its writers: it refuses a token lower than
// the highest it has seen, so a holder that lost the lock without noticing
// yet cannot overwrite the work of its successor.
type store struct {
	mu      sync.Mutex
	highest uint64
	value   string
}

func (s *store) Write(token uint64, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		return fmt.Errorf("stale token %d: %d has written since", token, s.highest)
	}
	s.highest, s.value = token, v
	return nil
}

// Pass the token to the guarded resource with every write: fencing is what
// protects it in the window between the server moving a lock and the old
// holder noticing.
func ExampleLock_Token() {
	addr, stop := exampleServer()
	defer stop()

	c, err := baton.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	var s store

	first, err := c.Acquire(ctx, "store")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Write(first.Token(), "from the first holder"))
	first.Release() // as if the lock had moved on while first was paused

	second, err := c.Acquire(ctx, "store")
	if err != nil {
		log.Fatal(err)
	}
	defer second.Release()
	fmt.Println(s.Write(second.Token(), "from the second holder"))

	// The first holder wakes up and writes with its old token.
	fmt.Println(s.Write(first.Token(), "late write"))
	fmt.Println(s.value)
	// Output:
	// <nil>
	// <nil>
	// stale token 1: 2 has written since
	// from the second holder
}

// exampleServer starts a Baton server on loopback for an example, and
// returns its address and a function that stops it. Real programs dial a
// running `baton serve`.
func exampleServer() (addr string, stop func()) {
	var tokens atomic.Uint64
	cfg := server.DefaultConfig()
	cfg.NextToken = func() uint64 { return tokens.Add(1) }
	cfg.Logger = slog.New(slog.DiscardHandler)
	srv, err := server.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-served
	}
}
