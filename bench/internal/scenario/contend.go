package scenario

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/bench/internal/system"
)

// contendConfig is one run of contenders on one name, the loop the
// handover and semaphore scenarios share.
type contendConfig struct {
	system   string // for messages
	name     string
	hold     time.Duration // how long each grant is held; 0 is back to back
	duration time.Duration // the measured window
	// onWindow, if set, is called as the window opens (true) and closes.
	onWindow func(open bool)
	// granted is called as a client's Lock returns, with whether the
	// window is open; it reports whether the grant counts as one of the
	// window's, for the client's share.
	granted func(measuring bool) bool
	// releasing is called just before a client's Unlock call, with
	// whether the run is stopping.
	releasing func(stopping bool)
}

// contention is what a contend run saw.
type contention struct {
	window               time.Duration
	grantsMin, grantsMax int // the fewest and most counted grants of one client
	Failures
}

// contend runs one goroutine per client: each takes cfg.name, holds it
// cfg.hold, lets it go and at once asks again. The window opens once
// every client has asked (or after 10 s) and 100 ms more, and lasts
// cfg.duration; then the clients stop, the last of them once the queue
// has drained, or cut by ctx after 10 s.
func contend(ctx context.Context, clients []system.Client, cfg contendConfig) (contention, error) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		res       contention
		measuring atomic.Bool
		stop      = make(chan struct{})
		entered   atomic.Int64 // clients that have asked once
		errs      atomic.Int64
		lastErr   atomic.Value
		grants    = make([]atomic.Int64, len(clients))
		wg        sync.WaitGroup
	)
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	failed := func(err error) {
		errs.Add(1)
		lastErr.Store(err.Error())
	}
	for id, c := range clients {
		wg.Go(func() {
			entered.Add(1)
			for !stopped() {
				if err := c.Lock(runCtx, cfg.name); err != nil {
					if runCtx.Err() != nil {
						return
					}
					failed(err)
					sleepUntil(stop, 10*time.Millisecond)
					continue
				}
				if cfg.granted(measuring.Load()) {
					grants[id].Add(1)
				}
				if cfg.hold > 0 {
					sleepUntil(stop, cfg.hold)
				}
				cfg.releasing(stopped())
				if err := c.Unlock(runCtx, cfg.name); err != nil && runCtx.Err() == nil {
					failed(err)
				}
			}
		})
	}

	settle := time.Now().Add(10 * time.Second)
	for entered.Load() < int64(len(clients)) && time.Now().Before(settle) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	sleepCtx(ctx, 100*time.Millisecond)
	if cfg.onWindow != nil {
		cfg.onWindow(true)
	}
	measuring.Store(true)
	start := time.Now()
	sleepCtx(ctx, cfg.duration)
	measuring.Store(false)
	res.window = time.Since(start)
	if cfg.onWindow != nil {
		cfg.onWindow(false)
	}
	close(stop)
	// Let the queue drain in order; then cut whoever still waits.
	if !waitTimeout(&wg, 10*time.Second) {
		cancel()
		if !waitTimeout(&wg, 10*time.Second) {
			// A client that ignores its context: closing the clients
			// (the caller's) is all that is left to stop it.
			return res, fmt.Errorf("%s: clients still blocked 10s after their context ended", cfg.system)
		}
	}

	res.grantsMin, res.grantsMax = -1, 0
	for i := range grants {
		g := int(grants[i].Load())
		if res.grantsMin < 0 || g < res.grantsMin {
			res.grantsMin = g
		}
		res.grantsMax = max(res.grantsMax, g)
	}
	res.Errors = int(errs.Load())
	if s, ok := lastErr.Load().(string); ok {
		res.LastError = s
	}
	return res, ctx.Err()
}
