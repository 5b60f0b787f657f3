package scenario

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/bench/internal/stats"
	"github.com/batonlock/baton/bench/internal/system"
	"github.com/batonlock/baton/clients/go/wire"
)

// PollingConfig sizes the polling scenario.
type PollingConfig struct {
	OpsAddr string        // Baton's ops listener
	Addr    string        // Baton's protocol listener, for the queue
	Queue   int           // waiters queued on another lock, for the listings to copy
	Pollers int           // loops polling GET /v1/locks without pause
	Waiters int           // the handover's waiters, as in the handover scenario
	Window  time.Duration // one measured window; each condition gets Rounds of them
	Rounds  int
}

// PollingResult is the handover beside a large queue, without and with
// operators' tools listing the locks without pause.
type PollingResult struct {
	Queue   int `json:"queue"`
	Pollers int `json:"pollers"`
	Waiters int `json:"waiters"`
	// Quiet is the handover with nobody listing, Polled with Pollers loops
	// listing; their windows alternate (ABBA), each condition's samples
	// pooled.
	Quiet  stats.Summary `json:"quiet"`
	Polled stats.Summary `json:"polled"`
	// Listings is how many GET /v1/locks answered in the polled windows,
	// and ListingP50 their median time.
	Listings   int           `json:"listings"`
	ListingP50 time.Duration `json:"listing_p50_ns"`
	Errors     int           `json:"errors"`
}

// Polling measures the handover of cfg.Waiters clients on one lock while
// cfg.Queue other sessions wait on another, first with nobody listing the
// locks and then with cfg.Pollers loops polling GET /v1/locks, in
// alternated windows. Listing the table must not hold up the lock that
// grants: the two handover figures should match.
func Polling(ctx context.Context, sys system.System, cfg PollingConfig) (PollingResult, error) {
	res := PollingResult{Queue: cfg.Queue, Pollers: cfg.Pollers, Waiters: cfg.Waiters}
	queue, err := fillQueue(ctx, cfg.Addr, "polling-queue", cfg.Queue)
	defer func() {
		for _, c := range queue {
			c.Close()
		}
	}()
	if err != nil {
		return res, err
	}
	var quiet, polled []time.Duration
	var listings stats.Recorder
	var errs atomic.Int64
	for round := range cfg.Rounds {
		order := []bool{false, true}
		if round%2 == 1 {
			order = []bool{true, false}
		}
		for _, poll := range order {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			if poll {
				for range cfg.Pollers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						pollLocks(ctx, cfg.OpsAddr, stop, &listings, &errs)
					}()
				}
			}
			h, err := Handover(ctx, sys, HandoverConfig{Waiters: cfg.Waiters, Duration: cfg.Window,
				Name: fmt.Sprintf("polling-%d-%v", round, poll), Samples: true})
			close(stop)
			wg.Wait()
			if err != nil {
				return res, err
			}
			res.Errors += h.Errors
			if poll {
				polled = append(polled, h.Samples...)
			} else {
				quiet = append(quiet, h.Samples...)
			}
		}
	}
	res.Quiet, res.Polled = stats.Summarize(quiet), stats.Summarize(polled)
	ls := listings.Summary()
	res.Listings, res.ListingP50 = ls.N, ls.P50
	res.Errors += int(errs.Load())
	return res, nil
}

// pollLocks lists the locks, reading every answer whole, until stop.
func pollLocks(ctx context.Context, opsAddr string, stop <-chan struct{}, rec *stats.Recorder, errs *atomic.Int64) {
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	for {
		select {
		case <-stop:
			return
		default:
		}
		start := time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+opsAddr+"/v1/locks", nil)
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			errs.Add(1)
			sleepUntil(stop, 10*time.Millisecond)
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		rec.Add(time.Since(start))
	}
}

// fillQueue holds lock name with one session and queues n-1 more behind
// it, each a raw connection with a lease long enough to need no
// heartbeat in the scenario's time.
func fillQueue(ctx context.Context, addr, name string, n int) ([]net.Conn, error) {
	frame, err := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 600000, Name: name, Owner: "queued"})
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	conns := make([]net.Conn, 0, n)
	for i := range n {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return conns, fmt.Errorf("queue session %d of %d: %w", i+1, n, err)
		}
		conns = append(conns, c)
		if _, err := c.Write(frame); err != nil {
			return conns, fmt.Errorf("queue session %d of %d: %w", i+1, n, err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var reply [wire.HeaderSize + 9]byte
		if _, err := io.ReadAtLeast(c, reply[:], wire.HeaderSize+5); err != nil {
			return conns, fmt.Errorf("queue session %d of %d: %w", i+1, n, err)
		}
	}
	return conns, nil
}
