package baton_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	baton "github.com/batonlock/baton/clients/go"
)

// Do is the usual way to hold a lock: the work runs while the lock is held.
// Before each step that touches the guarded resource it asks l.Err(),
// which reads the clock, so a process that wakes from a pause (GC,
// SIGSTOP) past the lock's deadline stops before the step; the fencing
// token guards the resource during a step.
func ExampleClient_Do() {
	addr, stop := exampleServer()
	defer stop()

	c, err := baton.New([]string{addr}, baton.WithLease(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	var s store
	err = c.Do(ctx, "jobs/nightly", func(ctx context.Context, l *baton.Lock) error {
		for _, batch := range []string{"batch 1", "batch 2"} {
			if err := l.Err(); err != nil {
				return err // lost: wraps baton.ErrLockLost and the cause
			}
			if err := s.Write(l.Token(), batch); err != nil {
				return err
			}
			fmt.Println("wrote", batch, "with token", l.Token())
		}
		return nil
	})
	if errors.Is(err, baton.ErrLockLost) {
		fmt.Println("the lock was lost during the job:", err)
	} else if err != nil {
		log.Fatal(err)
	}
	// Output:
	// wrote batch 1 with token 1099511627777
	// wrote batch 2 with token 1099511627777
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

	for step := range 3 {
		// Ask right before each step: l.Err() reads the clock, where
		// l.Done() is closed by a goroutine that may not have run yet.
		if err := l.Err(); err != nil {
			fmt.Println("lost before step", step, err)
			break
		}
		time.Sleep(10 * time.Millisecond) // the step
	}
	if err := l.Release(); err != nil {
		fmt.Println("the work ran partly without the lock:", err)
	}
	fmt.Println("released:", l.Err())
	// Output:
	// holding reports/daily with token 1099511627777
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
// holder noticing. Only the order of tokens matters; a fresh server's
// first is 2^40 + 1 (its epoch, 1, in the high bits).
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
	// stale token 1099511627777: 1099511627778 has written since
	// from the second holder
}

// Two candidates campaign for one election: the first leads, the second
// waits; when the first resigns, the second leads at once, with a higher
// term (token). A leader asks ld.Err() before each act, and stops leading
// when ld.Context() ends.
func ExampleClient_Campaign() {
	addr, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	candidate := func() *baton.Client {
		c, err := baton.New([]string{addr}, baton.WithLease(2*time.Second))
		if err != nil {
			log.Fatal(err)
		}
		return c
	}
	a, b := candidate(), candidate()

	first, err := a.Campaign(ctx, "leader/scheduler", "scheduler-a:8080")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(first.Value(), "leads, term", first.Token())

	next := make(chan *baton.Leadership)
	go func() {
		ld, err := b.Campaign(ctx, "leader/scheduler", "scheduler-b:8080")
		if err != nil {
			log.Fatal(err)
		}
		next <- ld
	}()

	if err := first.Err(); err == nil {
		fmt.Println(first.Value(), "schedules the jobs")
	}
	if err := first.Resign(); err != nil {
		fmt.Println("the lead was lost before resigning:", err)
	}
	second := <-next
	defer second.Resign()
	fmt.Println(second.Value(), "leads, term", second.Token())
	// Output:
	// scheduler-a:8080 leads, term 1099511627777
	// scheduler-a:8080 schedules the jobs
	// scheduler-b:8080 leads, term 1099511627778
}

// DoAll takes several locks without deadlock (in sorted order, all or
// nothing) and runs the work while all are held; its context ends when
// any is lost. Each lock's token fences its own resource.
func ExampleClient_DoAll() {
	addr, stop := exampleServer()
	defer stop()

	c, err := baton.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	accounts := []string{"account/2", "account/1"}
	err = c.DoAll(context.Background(), accounts, func(ctx context.Context, set *baton.LockSet) error {
		if err := set.Err(); err != nil { // every lock's clock, right before the step
			return err
		}
		for _, l := range set.Locks() {
			fmt.Println("holding", l.Name(), "with token", l.Token())
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// holding account/1 with token 1099511627777
	// holding account/2 with token 1099511627778
}

// WithMaxHold bounds a live holder: the claim ends (and the work is told)
// the set time after the grant, even while heartbeats still succeed.
func ExampleWithMaxHold() {
	addr, stop := exampleServer()
	defer stop()

	c, err := baton.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	err = c.Do(context.Background(), "jobs/hourly", func(ctx context.Context, l *baton.Lock) error {
		<-ctx.Done() // work that would otherwise never end
		return context.Cause(ctx)
	}, baton.WithMaxHold(50*time.Millisecond))
	fmt.Println(errors.Is(err, baton.ErrMaxHoldReached), errors.Is(err, baton.ErrLockLost))
	fmt.Println(err)
	// Output:
	// true true
	// lock "jobs/hourly" lost: maximum hold reached: held for 50ms
}

// WithMovedFunc reports each move of a claim to the next server (a
// restart, a change of leader: protocol version 3), which the work does
// not otherwise see: its context and its Lock go on. (No output: the move
// needs a server that restarts meanwhile.)
func ExampleWithMovedFunc() {
	c, err := baton.New([]string{"10.0.0.1:7070", "10.0.0.2:7070", "10.0.0.3:7070"},
		baton.WithMovedFunc(func(m baton.Moved) {
			log.Printf("lock %s moved from %s to %s in %v (%v)", m.Name, m.From, m.To, m.Took, m.Reason)
		}))
	if err != nil {
		log.Fatal(err)
	}
	err = c.Do(context.Background(), "jobs/nightly", func(ctx context.Context, l *baton.Lock) error {
		return nil // through a rolling restart of the cluster, as if nothing happened
	})
	if errors.Is(err, baton.ErrResumeRefused) {
		log.Print("the lock could not be carried to the next server in time")
	}
}

// IsRetryable tells a loss worth another try (a server going away, a
// broken link) from one that is not (an operator's force-release).
func ExampleIsRetryable() {
	addr, stop := exampleServer()
	defer stop()

	c, err := baton.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	for attempt := 1; attempt <= 3; attempt++ {
		err = c.Do(context.Background(), "jobs/sync", func(ctx context.Context, l *baton.Lock) error {
			if err := l.Err(); err != nil {
				return err
			}
			fmt.Println("attempt", attempt, "holds the lock")
			return nil
		})
		if !baton.IsRetryable(err) {
			break
		}
	}
	fmt.Println("done:", err)
	// Output:
	// attempt 1 holds the lock
	// done: <nil>
}

// WithLimit makes a counting semaphore: at most 2 renders run at once,
// however many workers ask; the others wait in the queue, in the order
// they came. The workers of one process share a Client, and there are more
// of them than slots, so they opt in to queueing behind each other, as
// goroutines sharing a mutex do.
func ExampleWithLimit() {
	addr, stop := exampleServer()
	defer stop()

	c, err := baton.New([]string{addr}, baton.WithLimit(2), baton.WithQueueBehindSelf(true))
	if err != nil {
		log.Fatal(err)
	}
	var (
		wg                     sync.WaitGroup
		inside, most, rendered atomic.Int32
	)
	for range 5 {
		wg.Go(func() {
			err := c.Do(context.Background(), "render/gpu", func(ctx context.Context, l *baton.Lock) error {
				n := inside.Add(1)
				defer inside.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				if !l.Shared() || l.Limit() != 2 {
					return fmt.Errorf("got a lock shared %v, limit %d; want a slot of 2", l.Shared(), l.Limit())
				}
				if err := l.Err(); err != nil {
					return err
				}
				time.Sleep(20 * time.Millisecond) // the render
				rendered.Add(1)
				return nil
			})
			if err != nil {
				log.Fatal(err)
			}
		})
	}
	wg.Wait()
	fmt.Println("rendered:", rendered.Load())
	fmt.Println("at most 2 at once:", most.Load() <= 2)
	// Output:
	// rendered: 5
	// at most 2 at once: true
}

// WithShared(true) makes a reader of a read/write lock; a writer is an
// ordinary claim of the same name. Readers hold together; a writer waits
// for them and then holds alone; a reader that comes after a waiting writer
// waits behind it, so a stream of readers cannot starve the writer.
func ExampleWithShared() {
	addr, stop := exampleServer()
	defer stop()

	readers, err := baton.New([]string{addr}, baton.WithShared(true))
	if err != nil {
		log.Fatal(err)
	}
	writers, err := baton.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	r1, err := readers.Acquire(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	r2, err := readers.Acquire(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("two readers hold together:", r1.Shared(), r2.Shared())

	// waitAt starts an Acquire and returns once the server has queued it.
	waitAt := func(c *baton.Client) (<-chan *baton.Lock, int) {
		queued := make(chan int, 1)
		got := make(chan *baton.Lock, 1)
		go func() {
			l, err := c.Acquire(ctx, "config", baton.WithWaitingFunc(func(pos int) {
				select {
				case queued <- pos:
				default:
				}
			}))
			if err != nil {
				log.Fatal(err)
			}
			got <- l
		}()
		return got, <-queued
	}
	writer, pos := waitAt(writers)
	fmt.Println("the writer waits at position", pos)
	late, pos := waitAt(readers)
	fmt.Println("a later reader waits behind it, at position", pos)

	r1.Release()
	r2.Release()
	w := <-writer
	fmt.Println("the writer holds alone:", !w.Shared())
	w.Release()
	l := <-late
	fmt.Println("then the reader, with a higher token:", l.Token() > w.Token())
	l.Release()
	// Output:
	// two readers hold together: true true
	// the writer waits at position 1
	// a later reader waits behind it, at position 2
	// the writer holds alone: true
	// then the reader, with a higher token: true
}

// The limit belongs to the name while it has shared sessions: a claim that
// gives another fails at once, is not retried, and says the limit in force.
func ExampleLimitMismatchError() {
	addr, stop := exampleServer()
	defer stop()

	c, err := baton.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	slot, err := c.Acquire(ctx, "pool/db", baton.WithLimit(3))
	if err != nil {
		log.Fatal(err)
	}
	defer slot.Release()

	_, err = c.Acquire(ctx, "pool/db", baton.WithLimit(5))
	var mismatch *baton.LimitMismatchError
	if errors.As(err, &mismatch) {
		fmt.Println("the name's limit is", mismatch.Limit)
	}
	fmt.Println(errors.Is(err, baton.ErrLimitMismatch), baton.IsRetryable(err))
	fmt.Println(err)
	// Output:
	// the name's limit is 3
	// true false
	// acquire "pool/db": LIMIT_MISMATCH: the name's limit in force is 3, this claim's is 5
}

// exampleServer starts the baton server (the binary TestMain's run builds
// from this repository) on loopback with an empty data directory, for one
// example, and returns its address and a function that stops it. Real
// programs dial a running `baton serve`.
func exampleServer() (addr string, stop func()) {
	addr, _, stop = exampleServerOps()
	return addr, stop
}

// exampleServerOps is exampleServer that also returns the ops API's
// address; extra flags come last, so they win (-addr=HOST:PORT).
func exampleServerOps(extra ...string) (addr, opsAddr string, stop func()) {
	bin, err := buildServer()
	if err != nil {
		log.Fatal(err)
	}
	data, err := os.MkdirTemp(exampleServerDir, "data-")
	if err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0",
		"-shutdown-linger=0s", "-log-format=json", "-data-dir=" + data}, extra...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		log.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	// One reader owns the server's output until the process ends: it
	// reports the address, keeps the log for a failure, and drains the pipe.
	serving := make(chan [2]string, 1)
	var logged strings.Builder
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			logged.WriteString(lines.Text() + "\n")
			var l struct {
				Msg, Addr string
				OpsAddr   string `json:"ops_addr"`
			}
			if json.Unmarshal(lines.Bytes(), &l) == nil && l.Msg == "baton serving" {
				select {
				case serving <- [2]string{l.Addr, l.OpsAddr}:
				default:
				}
			}
		}
		io.Copy(io.Discard, out)
	}()
	stop = func() {
		cmd.Process.Kill()
		<-drained
		cmd.Wait()
		os.RemoveAll(data)
	}
	select {
	case a := <-serving:
		return a[0], a[1], stop
	case <-drained:
		stop()
		log.Fatalf("baton serve ended before serving:\n%s", logged.String())
	case <-time.After(30 * time.Second):
		stop()
		log.Fatalf("baton serve did not report its address within 30s:\n%s", logged.String())
	}
	return "", "", nil
}
