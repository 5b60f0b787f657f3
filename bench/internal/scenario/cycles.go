package scenario

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/bench/internal/stats"
	"github.com/batonlock/baton/bench/internal/system"
)

// CyclesResult is one uncontended run of one system.
type CyclesResult struct {
	System  string `json:"system"`
	Clients int    `json:"clients"`
	// Latency is one Lock+Unlock on the client's own name (for Baton: a
	// new connection, ACQUIRE, ACQUIRED, close).
	Latency      stats.Summary `json:"latency"`
	CyclesPerSec float64       `json:"cycles_per_sec"`
	Failures
}

// Cycles runs clients clients, each acquiring and releasing its own lock
// back to back, for d.
func Cycles(ctx context.Context, sys system.System, clients int, d time.Duration) (CyclesResult, error) {
	res := CyclesResult{System: sys.Name(), Clients: clients}
	cs, err := newClients(ctx, sys, clients)
	if err != nil {
		return res, err
	}
	defer closeClients(cs)
	runCtx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	var (
		rec     stats.Recorder
		errs    atomic.Int64
		lastErr atomic.Value
		wg      sync.WaitGroup
		end     = time.Now().Add(d)
	)
	start := time.Now()
	for id, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("cycle-%d", id)
			for time.Now().Before(end) && runCtx.Err() == nil {
				t0 := time.Now()
				if err := c.Lock(runCtx, name); err != nil {
					errs.Add(1)
					lastErr.Store(err.Error())
					sleepCtx(runCtx, 10*time.Millisecond)
					continue
				}
				if err := c.Unlock(runCtx, name); err != nil {
					errs.Add(1)
					lastErr.Store(err.Error())
					continue
				}
				rec.Add(time.Since(t0))
			}
		}()
	}
	if !waitTimeout(&wg, d+40*time.Second) {
		cancel()
		if !waitTimeout(&wg, 10*time.Second) {
			return res, fmt.Errorf("%s: clients still blocked 10s after their context ended", sys.Name())
		}
	}
	window := time.Since(start)
	res.Latency = rec.Summary()
	res.CyclesPerSec = float64(res.Latency.N) / window.Seconds()
	res.Errors = int(errs.Load())
	if s, ok := lastErr.Load().(string); ok {
		res.LastError = s
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if res.Latency.N == 0 {
		return res, fmt.Errorf("%s: no cycle completed in %v (%d errors, last: %s)", sys.Name(), window, res.Errors, res.LastError)
	}
	return res, nil
}
