// Package loadgen is the scale scenario's load generator, run as a process
// of its own (the bench re-executes itself) so the server's figures are not
// mixed with the clients'. It holds many sessions in raw wire frames (two
// small goroutines per pair of sessions, no Go client machinery),
// heartbeating every lease/4 as docs/protocol.md's schedule does on
// loopback, and answers "stats" and "stop" on stdin with JSON lines on
// stdout.
package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/batonlock/baton/bench/internal/rawwire"
	"github.com/batonlock/baton/bench/internal/stats"
	"github.com/batonlock/baton/clients/go/wire"
)

// Config is what the parent asks for.
type Config struct {
	Addr       string
	Sessions   int           // holders and waiters; half each, in pairs on one lock
	ShortLease time.Duration // half the pairs
	LongLease  time.Duration // the other half
	Sources    int           // source addresses 127.0.0.1 .. 127.0.0.Sources
	DialPar    int           // dials in flight
	// Prefix starts every lock name, so that a run's names never meet
	// the sessions of an earlier run the server has not ended yet.
	Prefix string
}

// Ready is the first line the generator prints.
type Ready struct {
	Opened     int    `json:"opened"`
	Failed     int    `json:"failed"`
	FirstError string `json:"first_error,omitempty"`
	NoFile     uint64 `json:"nofile"`
	// Lost counts sessions already lost while the others were opening.
	Lost     int64         `json:"lost"`
	OpenTime time.Duration `json:"open_ns"`
}

// Stats answers "stats"; RTT covers the heartbeats since the last "stats".
type Stats struct {
	Heartbeats int64         `json:"heartbeats"`
	Lost       int64         `json:"lost"`
	Promotions int64         `json:"promotions"`
	LastLoss   string        `json:"last_loss,omitempty"`
	RTT        stats.Summary `json:"heartbeat_rtt"`
}

// RaiseNoFile lifts the soft RLIMIT_NOFILE to the hard limit and returns it.
func RaiseNoFile() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", lim.Max, err)
	}
	return lim.Cur, nil
}

type generator struct {
	cfg        Config
	heartbeats atomic.Int64
	lost       atomic.Int64
	promotions atomic.Int64
	lastLoss   atomic.Value
	mu         sync.Mutex
	rtts       []time.Duration
	conns      sync.Map // *rawwire.Conn -> struct{}
	wg         sync.WaitGroup
	stopping   atomic.Bool
	stop       chan struct{} // closed by closeAll: beats end their sleep
}

// maxRTTSamples bounds the memory of one stats window.
const maxRTTSamples = 1 << 20

// Run opens the sessions, prints Ready, then serves commands on in until
// "stop", EOF or ctx; it closes every session before it returns.
func Run(ctx context.Context, cfg Config, in io.Reader, out io.Writer) error {
	nofile, err := RaiseNoFile()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := &generator{cfg: cfg, stop: make(chan struct{})}
	ready := Ready{NoFile: nofile}
	var (
		failMu sync.Mutex
		sem    = make(chan struct{}, max(1, cfg.DialPar))
		open   sync.WaitGroup
	)
	opening := time.Now()
	pairs := cfg.Sessions / 2
	for k := range pairs {
		sem <- struct{}{}
		open.Add(1)
		go func() {
			defer open.Done()
			n, err := g.openPair(ctx, k)
			<-sem
			failMu.Lock()
			ready.Opened += n
			if err != nil {
				ready.Failed += 2 - n
				if ready.FirstError == "" {
					ready.FirstError = err.Error()
				}
			}
			failMu.Unlock()
		}()
	}
	open.Wait()
	ready.Lost, ready.OpenTime = g.lost.Load(), time.Since(opening)
	enc := json.NewEncoder(out)
	if err := enc.Encode(ready); err != nil {
		return err
	}

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	defer g.closeAll()
	for {
		select {
		case <-ctx.Done():
			return nil
		case line, ok := <-lines:
			if !ok || line == "stop" {
				return nil
			}
			if line == "stats" {
				if err := enc.Encode(g.stats()); err != nil {
					return err
				}
			}
		}
	}
}

func (g *generator) closeAll() {
	g.stopping.Store(true)
	close(g.stop)
	g.conns.Range(func(k, _ any) bool {
		k.(*rawwire.Conn).Close()
		return true
	})
	g.wg.Wait()
}

func (g *generator) stats() Stats {
	g.mu.Lock()
	rtts := g.rtts
	g.rtts = nil
	g.mu.Unlock()
	s := Stats{
		Heartbeats: g.heartbeats.Load(),
		Lost:       g.lost.Load(),
		Promotions: g.promotions.Load(),
		RTT:        stats.Summarize(rtts),
	}
	if l, ok := g.lastLoss.Load().(string); ok {
		s.LastLoss = l
	}
	return s
}

// openPair opens the holder and then the waiter of lock k and starts
// their heartbeats. It returns how many sessions it opened.
func (g *generator) openPair(ctx context.Context, k int) (int, error) {
	lease := g.cfg.ShortLease
	if k%2 == 1 {
		lease = g.cfg.LongLease
	}
	name := fmt.Sprintf("%sscale-%d", g.cfg.Prefix, k)
	opened := 0
	for role, want := range []wire.Type{wire.TypeAcquired, wire.TypeWaiting} {
		j := 2*k + role
		laddr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+j%max(1, g.cfg.Sources)))}
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		c, err := rawwire.Dial(dctx, g.cfg.Addr, laddr)
		cancel()
		if err != nil {
			return opened, fmt.Errorf("dial %s from %s: %w", g.cfg.Addr, laddr.IP, err)
		}
		if err := c.Acquire(name, lease, "bench-load"); err != nil {
			c.Close()
			return opened, err
		}
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		f, err := c.ReadFrame()
		if err != nil || f.Type != want {
			c.Close()
			if f.Err != nil {
				err = f.Err
			}
			return opened, fmt.Errorf("session %d on %s: got %v (%v), want %v", j, name, f.Type, err, want)
		}
		g.conns.Store(c, struct{}{})
		opened++
		g.wg.Add(1)
		go g.beat(c, lease)
	}
	return opened, nil
}

// beat heartbeats c every lease/4, first at a random offset so the load
// is spread evenly, until the connection ends.
func (g *generator) beat(c *rawwire.Conn, lease time.Duration) {
	defer g.wg.Done()
	defer g.conns.Delete(c)
	defer c.Close()
	interval := lease / 4
	if !g.sleep(rand.N(interval)) {
		return
	}
	for {
		sent := time.Now()
		c.SetDeadline(sent.Add(lease))
		if err := c.Heartbeat(); err != nil {
			g.loss(err)
			return
		}
		for {
			f, err := c.ReadFrame()
			if err != nil {
				g.loss(err)
				return
			}
			if f.Err != nil {
				g.loss(f.Err)
				return
			}
			if f.Type == wire.TypeAcquired && f.Push {
				g.promotions.Add(1) // our holder was lost; read on for the reply
				continue
			}
			break
		}
		rtt := time.Since(sent)
		g.heartbeats.Add(1)
		g.mu.Lock()
		if len(g.rtts) < maxRTTSamples {
			g.rtts = append(g.rtts, rtt)
		}
		g.mu.Unlock()
		if !g.sleep(time.Until(sent.Add(interval))) {
			return
		}
	}
}

// sleep waits d; it reports false if the generator is stopping.
func (g *generator) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-g.stop:
		return false
	}
}

func (g *generator) loss(err error) {
	if g.stopping.Load() {
		return // closed by closeAll
	}
	g.lost.Add(1)
	g.lastLoss.Store(err.Error())
}
