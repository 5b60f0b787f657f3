package scenario

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/bench/internal/batonsys"
	"github.com/batonlock/baton/bench/internal/stats"
	"github.com/batonlock/baton/bench/internal/system"
)

// SemaphoreConfig sizes one semaphore run.
type SemaphoreConfig struct {
	Limit      int           // slots of the name
	Contenders int           // clients, each taking a slot, holding it, giving it back, again
	Hold       time.Duration // how long each holder keeps its slot; 0 is back to back
	Duration   time.Duration // the measured window
	Name       string        // the semaphore's name
	Round      int           // which round of the comparison, for the results
	// ServerPID, if not 0, is the server process whose CPU time over the
	// window is divided by the slot changes.
	ServerPID int
}

// SemaphoreResult is one semaphore run of one system.
type SemaphoreResult struct {
	System     string        `json:"system"`
	Round      int           `json:"round"`
	Limit      int           `json:"limit"`
	Contenders int           `json:"contenders"`
	Hold       time.Duration `json:"hold_ns"`
	// Handover runs from a holder's Unlock call to a waiter's Lock
	// return, both in this process on the monotonic clock. Slots are
	// granted in queue order, so each grant is paired with the earliest
	// release not yet paired.
	Handover stats.Summary `json:"handover"`
	// SlotChangesPerSec counts the grants of the window that took a slot
	// another client had let go.
	SlotChangesPerSec float64 `json:"slot_changes_per_sec"`
	// GrantsMin and GrantsMax are the fewest and most grants one client
	// got in the window.
	GrantsMin int `json:"grants_min"`
	GrantsMax int `json:"grants_max"`
	// MostHolders is the most clients that held a slot at once, as the
	// clients saw it: from a Lock's return to the Unlock call. A
	// semaphore keeps it at or below the limit.
	MostHolders int `json:"most_holders"`
	// ServerCPUPerChange is the server's CPU time over the window divided
	// by the slot changes, with SemaphoreConfig.ServerPID.
	ServerCPUPerChange time.Duration `json:"server_cpu_per_change_ns,omitempty"`
	// ServerMean is, for Baton, the server's own mean handover time over
	// the run (baton_handover_latency_seconds), set by the caller.
	ServerMean time.Duration `json:"server_mean_ns,omitempty"`
	Failures
}

// Semaphore runs cfg.Contenders clients on one semaphore of cfg.Limit
// slots: each takes a slot, holds it cfg.Hold, gives it back and at once
// asks again, so that every slot a holder lets go has a waiter. It reports
// the handover latency and the slot changes a second over cfg.Duration,
// once every client has asked once, and fails if the clients ever saw more
// holders than the limit.
func Semaphore(ctx context.Context, sys system.Semaphores, cfg SemaphoreConfig) (SemaphoreResult, error) {
	res := SemaphoreResult{System: sys.Name(), Round: cfg.Round, Limit: cfg.Limit, Contenders: cfg.Contenders, Hold: cfg.Hold}
	if cfg.Limit < 1 || cfg.Contenders <= cfg.Limit {
		return res, fmt.Errorf("%s: %d contenders on %d slots: want a limit of 1 or more and more contenders than slots", sys.Name(), cfg.Contenders, cfg.Limit)
	}
	clients, err := newSlotClients(ctx, sys, cfg.Contenders, cfg.Limit)
	if err != nil {
		return res, err
	}
	defer closeClients(clients)

	var (
		base      = time.Now()
		line      = newReleaseLine(cfg.Limit)
		holders   atomic.Int64
		most      atomic.Int64
		rec       stats.Recorder
		serverCPU func() time.Duration
		cpu       time.Duration
	)
	run, err := contend(ctx, clients, contendConfig{
		system: sys.Name(), name: cfg.Name, hold: cfg.Hold, duration: cfg.Duration,
		onWindow: func(open bool) {
			if open {
				serverCPU = serverCPUFrom(cfg.ServerPID)
			} else {
				cpu = serverCPU()
			}
		},
		granted: func(measuring bool) bool {
			at := time.Since(base)
			n := holders.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				// another holder raised most first: compare again
			}
			latency, paired := line.grant(at)
			if paired && measuring {
				rec.Add(latency)
			}
			return paired && measuring
		},
		releasing: func(bool) {
			holders.Add(-1)
			line.release(time.Since(base))
		},
	})
	res.Handover = rec.Summary()
	res.SlotChangesPerSec = float64(res.Handover.N) / run.window.Seconds()
	if res.Handover.N > 0 {
		res.ServerCPUPerChange = cpu / time.Duration(res.Handover.N)
	}
	res.GrantsMin, res.GrantsMax = run.grantsMin, run.grantsMax
	res.MostHolders = int(most.Load())
	res.Failures = run.Failures
	switch {
	case err != nil:
		return res, err
	case res.MostHolders > cfg.Limit:
		return res, fmt.Errorf("%s: %d clients held a slot at once, limit %d", sys.Name(), res.MostHolders, cfg.Limit)
	case res.Handover.N == 0:
		return res, fmt.Errorf("%s: no slot changed hands in %v (%d errors, last: %s)", sys.Name(), run.window, res.Errors, res.LastError)
	}
	return res, nil
}

// serverCPUFrom reads the CPU time of process pid now and returns what
// reads it again: the CPU time in between, or 0 if pid is 0 or a read
// fails.
func serverCPUFrom(pid int) func() time.Duration {
	if pid <= 0 {
		return func() time.Duration { return 0 }
	}
	c0, err0 := batonsys.ProcessCPU(pid)
	return func() time.Duration {
		c1, err1 := batonsys.ProcessCPU(pid)
		if err0 != nil || err1 != nil {
			return 0
		}
		return c1 - c0
	}
}

// newSlotClients opens n clients of a semaphore of limit slots, within a
// minute.
func newSlotClients(ctx context.Context, sys system.Semaphores, n, limit int) ([]system.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	clients := make([]system.Client, 0, n)
	for id := range n {
		c, err := sys.NewSlotClient(ctx, id, limit)
		if err != nil {
			closeClients(clients)
			return nil, fmt.Errorf("%s: client %d of %d: %w", sys.Name(), id, n, err)
		}
		clients = append(clients, c)
	}
	return clients, nil
}

// releaseLine pairs each grant with the release whose slot it took. The
// first limit grants take slots nobody held; after them, slots go to the
// waiters in queue order, so each grant takes the slot of the earliest
// release not yet paired. Two releases at nearly the same time may reach
// the server in the other order: then their two grants swap partners,
// which moves each latency by the gap between the releases and leaves
// their mean as it is.
type releaseLine struct {
	mu       sync.Mutex
	free     int             // slots not yet taken once
	released []time.Duration // release times not yet paired, oldest first
}

func newReleaseLine(limit int) *releaseLine { return &releaseLine{free: limit} }

// release records a holder letting go at at; it must come before the
// Unlock call, so before the grant it allows.
func (l *releaseLine) release(at time.Duration) {
	l.mu.Lock()
	l.released = append(l.released, at)
	l.mu.Unlock()
}

// grant records a grant at at and returns the time since the release it
// followed; paired is false for a slot nobody had held, and for a grant no
// release accounts for.
func (l *releaseLine) grant(at time.Duration) (latency time.Duration, paired bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.free > 0 {
		l.free--
		return 0, false
	}
	if len(l.released) == 0 {
		return 0, false
	}
	from := l.released[0]
	l.released = l.released[1:]
	return at - from, true
}
