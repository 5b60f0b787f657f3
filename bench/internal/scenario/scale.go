package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/batonlock/baton/bench/internal/batonsys"
	"github.com/batonlock/baton/bench/internal/loadgen"
	"github.com/batonlock/baton/bench/internal/proc"
	"github.com/batonlock/baton/bench/internal/stats"
)

// ScaleConfig sizes one step of the scale scenario.
type ScaleConfig struct {
	Sessions   int
	ShortLease time.Duration
	LongLease  time.Duration
	Settle     time.Duration // after the last session opened, before measuring
	Window     time.Duration // CPU per heartbeat is measured over it
	Probe      time.Duration // each handover probe
	BatonBin   string        // the baton binary
	Dir        string        // for data directories
	// LoadGen returns the command line that runs the load generator: the
	// bench binary re-executed in its load role.
	LoadGen func(cfg loadgen.Config) (string, []string)
}

// ScaleResult is one step: a fresh server, idle, then under Sessions.
type ScaleResult struct {
	Sessions int `json:"sessions"`
	Opened   int `json:"opened"`
	Failed   int `json:"failed"`
	// Live is the server's baton_sessions when memory was sampled, at
	// the start of the window; LiveEnd at its end.
	Live    int `json:"live"`
	LiveEnd int `json:"live_end"`
	// Server memory, idle and under load: RSS from /proc, Go heap in use
	// and goroutine stacks in use from /metrics.
	IdleRSS   int64 `json:"idle_rss_bytes"`
	LoadRSS   int64 `json:"load_rss_bytes"`
	IdleHeap  int64 `json:"idle_heap_bytes"`
	LoadHeap  int64 `json:"load_heap_bytes"`
	IdleStack int64 `json:"idle_stack_bytes"`
	LoadStack int64 `json:"load_stack_bytes"`
	// Per session: (load - idle) / opened.
	RSSPerSession   float64 `json:"rss_per_session_bytes"`
	HeapPerSession  float64 `json:"heap_per_session_bytes"`
	StackPerSession float64 `json:"stack_per_session_bytes"`
	// GoroutinesPerSession is the server's goroutines over idle, per
	// live session: what the stacks are made of.
	GoroutinesPerSession float64 `json:"goroutines_per_session"`
	// Heartbeats the server counted in the window, and its CPU time.
	HeartbeatsPerSec float64 `json:"heartbeats_per_sec"`
	Cost
	Window          time.Duration `json:"window_ns"`
	CPUPerHeartbeat time.Duration `json:"cpu_per_heartbeat_ns"`
	// LoadGenCPU is the load generator's CPU time in the window: it
	// shares the 2 cores with the server.
	LoadGenCPU time.Duration `json:"loadgen_cpu_ns"`
	// HeartbeatRTT is the load generator's heartbeat round trip in the window.
	HeartbeatRTT stats.Summary `json:"heartbeat_rtt"`
	Lost         int64         `json:"sessions_lost"`
	LostOpening  int64         `json:"sessions_lost_while_opening"`
	OpenTime     time.Duration `json:"open_ns"`
	LastLoss     string        `json:"last_loss,omitempty"`
	// Handover on a separate lock with 8 waiters while the load runs.
	Handover     HandoverResult `json:"handover"`
	HandoverIdle HandoverResult `json:"handover_after_hold"`
	Sources      int            `json:"source_addresses"`
	ShortLease   time.Duration  `json:"short_lease_ns"`
	LongLease    time.Duration  `json:"long_lease_ns"`
}

// ScheduledBeatsPerSession is the heartbeat rate of one session on the
// schedule (every lease/4), averaged over the two leases in equal shares.
func (r ScaleResult) ScheduledBeatsPerSession() float64 {
	if r.ShortLease <= 0 || r.LongLease <= 0 {
		return 0
	}
	return (4/r.ShortLease.Seconds() + 4/r.LongLease.Seconds()) / 2
}

// Scale runs one step of the scale scenario against a fresh Baton server.
func Scale(ctx context.Context, cfg ScaleConfig) (ScaleResult, error) {
	res := ScaleResult{Sessions: cfg.Sessions, ShortLease: cfg.ShortLease, LongLease: cfg.LongLease}
	srv, err := batonsys.StartServer(ctx, cfg.BatonBin, cfg.Dir)
	if err != nil {
		return res, err
	}
	defer srv.Stop()

	sleepCtx(ctx, time.Second)
	idle, idleM, err := sample(ctx, srv)
	if err != nil {
		return res, err
	}
	res.IdleRSS, res.IdleHeap, res.IdleStack = idle.RSS, int64(idleM["go_memstats_heap_inuse_bytes"]), int64(idleM["go_memstats_stack_inuse_bytes"])

	// One source address per 5,000 sessions keeps each well inside the
	// ephemeral port range (28,232 ports by default), which other
	// programs on the machine may be using too.
	res.Sources = cfg.Sessions/5000 + 1
	lc := loadgen.Config{Addr: srv.Addr, Sessions: cfg.Sessions, ShortLease: cfg.ShortLease,
		LongLease: cfg.LongLease, Sources: res.Sources, DialPar: 200}
	gen, ready, stop, err := StartLoadGen(ctx, cfg.LoadGen, lc)
	if err != nil {
		return res, err
	}
	defer stop()
	res.Opened, res.Failed = ready.Opened, ready.Failed
	res.LostOpening, res.OpenTime = ready.Lost, ready.OpenTime
	if ready.Opened == 0 {
		return res, fmt.Errorf("load generator opened no session: %s", ready.FirstError)
	}
	if ready.Failed > 0 {
		res.LastLoss = "open: " + ready.FirstError
	}

	sleepCtx(ctx, cfg.Settle)
	if _, err := GenStats(ctx, gen); err != nil { // resets the RTT window
		return res, err
	}
	u0, m0, err := sample(ctx, srv)
	if err != nil {
		return res, err
	}
	g0, err := batonsys.ProcessCPU(gen.PID())
	if err != nil {
		return res, err
	}
	start := time.Now()
	sleepCtx(ctx, cfg.Window)
	u1, m1, err := sample(ctx, srv)
	if err != nil {
		return res, err
	}
	g1, err := batonsys.ProcessCPU(gen.PID())
	if err != nil {
		return res, err
	}
	res.LoadGenCPU = g1 - g0
	res.Window = time.Since(start)
	gs, err := GenStats(ctx, gen)
	if err != nil {
		return res, err
	}
	res.HeartbeatRTT, res.Lost = gs.RTT, gs.Lost
	if gs.LastLoss != "" {
		res.LastLoss = gs.LastLoss
	}
	beats := m1["baton_heartbeats_total"] - m0["baton_heartbeats_total"]
	res.ServerCPU = u1.CPU - u0.CPU
	res.HeartbeatsPerSec = beats / res.Window.Seconds()
	if beats > 0 {
		res.CPUPerHeartbeat = time.Duration(float64(res.ServerCPU) / beats)
	}
	// Memory is taken at the start of the window, when every session
	// opened is still held (a machine too busy for the heartbeat schedule
	// loses sessions later), and divided by the sessions the server holds
	// then.
	res.LoadRSS, res.LoadHeap, res.LoadStack = u0.RSS, int64(m0["go_memstats_heap_inuse_bytes"]), int64(m0["go_memstats_stack_inuse_bytes"])
	res.Live = int(m0["baton_sessions"])
	res.GoroutinesPerSession = (m0["go_goroutines"] - idleM["go_goroutines"]) / float64(max(1, res.Live))
	res.LiveEnd = int(m1["baton_sessions"])
	n := float64(max(1, res.Live))
	res.RSSPerSession = float64(res.LoadRSS-res.IdleRSS) / n
	res.HeapPerSession = float64(res.LoadHeap-res.IdleHeap) / n
	res.StackPerSession = float64(res.LoadStack-res.IdleStack) / n

	sys := batonsys.NewSystem(srv, cfg.BatonBin, 10*time.Second)
	res.Handover, err = Handover(ctx, sys, HandoverConfig{Waiters: 8, Duration: cfg.Probe, Name: "probe"})
	if err != nil {
		return res, fmt.Errorf("handover under load: %w", err)
	}
	res.HandoverIdle, err = Handover(ctx, sys, HandoverConfig{Waiters: 8, Hold: 20 * time.Millisecond, Duration: cfg.Probe, Name: "probe-hold"})
	if err != nil {
		return res, fmt.Errorf("handover under load: %w", err)
	}
	return res, nil
}

func sample(ctx context.Context, srv *batonsys.Server) (batonsys.Usage, map[string]float64, error) {
	u, err := batonsys.ReadUsage(srv.PID())
	if err != nil {
		return u, nil, err
	}
	m, err := srv.Metrics(ctx)
	return u, m, err
}

// GenStats asks the load generator for its counters since the last ask.
func GenStats(ctx context.Context, gen *proc.Process) (loadgen.Stats, error) {
	var s loadgen.Stats
	if _, err := io.WriteString(gen.Stdin, "stats\n"); err != nil {
		return s, fmt.Errorf("load generator: %w", err)
	}
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	line, err := gen.ReadLine(c)
	if err != nil {
		return s, fmt.Errorf("load generator: %w", err)
	}
	if err := json.Unmarshal([]byte(line), &s); err != nil {
		return s, fmt.Errorf("load generator said %q: %w", line, err)
	}
	return s, nil
}

// LoadGenArgs renders cfg as the flags of the bench's load role.
func LoadGenArgs(cfg loadgen.Config) []string {
	return []string{"-role", "load", "-addr", cfg.Addr,
		"-sessions", strconv.Itoa(cfg.Sessions),
		"-short-lease", cfg.ShortLease.String(), "-long-lease", cfg.LongLease.String(),
		"-sources", strconv.Itoa(cfg.Sources), "-dial-par", strconv.Itoa(cfg.DialPar), "-lock-prefix", cfg.Prefix}
}

// StartLoadGen starts the load generator (a process of its own) with lc
// and waits, up to 5 minutes, for its line saying the sessions are open.
// stop asks it to end and waits for it; call it once done with gen.
func StartLoadGen(ctx context.Context, cmdLine func(loadgen.Config) (string, []string), lc loadgen.Config) (gen *proc.Process, ready loadgen.Ready, stop func(), err error) {
	name, args := cmdLine(lc)
	gen, err = proc.Start(name, args...)
	if err != nil {
		return nil, ready, nil, err
	}
	stop = func() {
		io.WriteString(gen.Stdin, "stop\n")
		select {
		case <-gen.Done():
		case <-time.After(30 * time.Second):
			gen.Stop(5 * time.Second)
		}
	}
	openCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	line, err := gen.ReadLine(openCtx)
	cancel()
	if err == nil {
		if jerr := json.Unmarshal([]byte(line), &ready); jerr != nil {
			err = fmt.Errorf("load generator said %q: %w", line, jerr)
		}
	} else {
		err = fmt.Errorf("load generator: %w", err)
	}
	if err != nil {
		stop()
		return nil, ready, nil, err
	}
	return gen, ready, stop, nil
}
