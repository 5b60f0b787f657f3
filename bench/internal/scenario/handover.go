// Package scenario holds the scenarios every system runs: handover,
// uncontended cycles and (Baton only) failure detection. Each is bounded in
// time and stops by itself.
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

// HandoverConfig sizes one handover run.
type HandoverConfig struct {
	Waiters  int           // clients queued behind the holder
	Hold     time.Duration // how long each holder keeps the lock; 0 is back to back
	Duration time.Duration // the measured window
	Name     string        // the lock
	// OnWindow, if set, is called as the measured window opens (true)
	// and closes (false): the floor comparison reads the server's CPU
	// time there.
	OnWindow func(open bool)
	// Samples keeps every latency sample in HandoverResult.Samples, for
	// a caller that pools several runs.
	Samples bool
}

// HandoverResult is one handover run of one system.
type HandoverResult struct {
	System  string        `json:"system"`
	Waiters int           `json:"waiters"`
	Hold    time.Duration `json:"hold_ns"`
	// Latency runs from the holder's Unlock call to the next holder's Lock
	// return, both in this process on the monotonic clock.
	Latency        stats.Summary `json:"latency"`
	HandoffsPerSec float64       `json:"handoffs_per_sec"`
	// GrantsMin and GrantsMax are the fewest and most grants one client got
	// in the window: fairness is GrantsMax/GrantsMin.
	GrantsMin int `json:"grants_min"`
	GrantsMax int `json:"grants_max"`
	Failures
	// ServerMean is, for Baton, the server's own mean handover time over
	// the run (baton_handover_latency_seconds: from the end of the
	// holder's session to the push written), to tell the server's part
	// from the kernel's and the client's.
	ServerMean time.Duration `json:"server_mean_ns,omitempty"`
	// Samples are the latencies summarized in Latency, with
	// HandoverConfig.Samples.
	Samples []time.Duration `json:"-"`
}

// Handover queues cfg.Waiters clients behind a holder on one lock; every
// client re-queues as soon as it lets go, so the queue stays full. It
// reports the handover latency, the handoffs per second and the grants per
// client, counted over cfg.Duration once every client has asked once.
func Handover(ctx context.Context, sys system.System, cfg HandoverConfig) (HandoverResult, error) {
	res := HandoverResult{System: sys.Name(), Waiters: cfg.Waiters, Hold: cfg.Hold}
	clients, err := newClients(ctx, sys, cfg.Waiters+1)
	if err != nil {
		return res, err
	}
	defer closeClients(clients)

	var (
		base     = time.Now()
		unlockAt atomic.Int64 // ns since base of the last measured Unlock call; 0: none
		rec      stats.Recorder
	)
	run, err := contend(ctx, clients, contendConfig{
		system: sys.Name(), name: cfg.Name, hold: cfg.Hold, duration: cfg.Duration, onWindow: cfg.OnWindow,
		granted: func(measuring bool) bool {
			now := int64(time.Since(base))
			if at := unlockAt.Swap(0); at != 0 && measuring {
				rec.Add(time.Duration(now - at))
				return true
			}
			return false
		},
		releasing: func(stopping bool) {
			if !stopping {
				unlockAt.Store(int64(time.Since(base)))
			}
		},
	})
	res.Latency = rec.Summary()
	if cfg.Samples {
		res.Samples = rec.Samples()
	}
	res.HandoffsPerSec = float64(res.Latency.N) / run.window.Seconds()
	res.GrantsMin, res.GrantsMax = run.grantsMin, run.grantsMax
	res.Failures = run.Failures
	if err != nil {
		return res, err
	}
	if res.Latency.N == 0 {
		return res, fmt.Errorf("%s: no handover in %v (%d errors, last: %s)", sys.Name(), run.window, res.Errors, res.LastError)
	}
	return res, nil
}

// newClients opens n clients, within a minute.
func newClients(ctx context.Context, sys system.System, n int) ([]system.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	clients := make([]system.Client, 0, n)
	for id := range n {
		c, err := sys.NewClient(ctx, id)
		if err != nil {
			closeClients(clients)
			return nil, fmt.Errorf("%s: client %d of %d: %w", sys.Name(), id, n, err)
		}
		clients = append(clients, c)
	}
	return clients, nil
}

func closeClients(clients []system.Client) {
	for _, c := range clients {
		c.Close()
	}
}

// sleepUntil sleeps d or until stop is closed.
func sleepUntil(stop <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-stop:
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	sleepUntil(ctx.Done(), d)
}

// Sleep waits d, or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) { sleepCtx(ctx, d) }

// waitTimeout waits for wg, at most d; it reports whether wg finished.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
