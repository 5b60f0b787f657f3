package scenario

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/batonlock/baton/bench/internal/rawwire"
	"github.com/batonlock/baton/bench/internal/stats"
	"github.com/batonlock/baton/clients/go/wire"
)

// DetectResult is the failure-detection run for one lease.
type DetectResult struct {
	System string        `json:"system"`
	Lease  time.Duration `json:"lease_ns"`
	// Error is (waiter's receipt of the ACQUIRED push) - (write of the
	// silent holder's last frame) - lease: how late the server ended the
	// holder and promoted the next. Negative would be a bug (too early).
	Error stats.Summary `json:"error"`
	// Early counts promotions before a full lease of silence.
	Early int `json:"early"`
}

// Detect measures Baton's failure detection: a holder with lease L sends
// ACQUIRE and then nothing; a waiter with a long lease queues behind it and
// times the push. samples runs, parallel at a time, started at random
// offsets so their expiries do not line up.
func Detect(ctx context.Context, addr string, lease time.Duration, samples, parallel int) (DetectResult, error) {
	res := DetectResult{System: "baton", Lease: lease}
	var (
		rec     stats.Recorder
		mu      sync.Mutex
		firstEr error
		wg      sync.WaitGroup
		next    = make(chan int)
	)
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				d, err := detectOnce(ctx, addr, fmt.Sprintf("detect-%v-%d", lease, i), lease)
				if err != nil {
					mu.Lock()
					if firstEr == nil {
						firstEr = err
					}
					mu.Unlock()
					continue
				}
				rec.Add(d - lease)
				if d < lease {
					mu.Lock()
					res.Early++
					mu.Unlock()
				}
			}
		}()
	}
	stagger := time.Duration(0)
	if parallel > 1 {
		stagger = lease / time.Duration(parallel)
	}
feed:
	for i := range samples {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
		if i < parallel && stagger > 0 {
			sleepCtx(ctx, stagger+time.Duration(rand.Int64N(int64(time.Millisecond))))
		}
	}
	close(next)
	wg.Wait()
	res.Error = rec.Summary()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if firstEr != nil {
		return res, firstEr
	}
	return res, nil
}

// detectOnce returns the time from just before the write of the silent
// holder's ACQUIRE to the waiter's receipt of the push.
func detectOnce(ctx context.Context, addr, name string, lease time.Duration) (time.Duration, error) {
	holder, err := rawwire.Dial(ctx, addr, nil)
	if err != nil {
		return 0, err
	}
	defer holder.Close()
	waiter, err := rawwire.Dial(ctx, addr, nil)
	if err != nil {
		return 0, err
	}
	defer waiter.Close()
	// Before the write, not after: on loopback the server can read the
	// frame (and start the lease) before the write call returns here, so
	// a time taken after it could make a correct expiry look early.
	silentFrom := time.Now()
	if err := holder.Acquire(name, lease, "bench-silent-holder"); err != nil {
		return 0, err
	}
	holder.SetReadDeadline(time.Now().Add(5 * time.Second))
	if f, err := holder.ReadFrame(); err != nil || f.Type != wire.TypeAcquired {
		return 0, fmt.Errorf("detect %s: holder got %+v, %v; want ACQUIRED", name, f, err)
	}
	if err := waiter.Acquire(name, time.Minute, "bench-waiter"); err != nil {
		return 0, err
	}
	waiter.SetReadDeadline(time.Now().Add(lease + 10*time.Second))
	if f, err := waiter.ReadFrame(); err != nil || f.Type != wire.TypeWaiting {
		return 0, fmt.Errorf("detect %s: waiter got %+v, %v; want WAITING", name, f, err)
	}
	f, err := waiter.ReadFrame()
	promoted := time.Since(silentFrom)
	if err != nil || f.Type != wire.TypeAcquired || !f.Push {
		return 0, fmt.Errorf("detect %s: waiter got %+v, %v; want the ACQUIRED push", name, f, err)
	}
	return promoted, nil
}
