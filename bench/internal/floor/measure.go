package floor

// The measuring functions of the comparison: each runs one scenario's
// clients against one server and returns its figures.

import (
	"context"
	"fmt"
	"time"

	"github.com/batonlock/baton/bench/internal/batonsys"
	"github.com/batonlock/baton/bench/internal/loadgen"
	"github.com/batonlock/baton/bench/internal/scenario"
	"github.com/batonlock/baton/bench/internal/system"
)

// profile starts t's profile for label, if profiles are wanted.
func profile(t Target, label string) func() {
	if t.Profile == nil {
		return func() {}
	}
	return t.Profile(label)
}

// cpu is the CPU time of process pid so far.
var cpu = batonsys.ProcessCPU

// hotLock runs cfg.Contenders clients of sys (on t, releasing by reset
// if rst) on one lock; client names the clients in the profile's label.
func hotLock(ctx context.Context, cfg Config, t Target, sys system.System, rst bool, client string) (HotLock, error) {
	var (
		r        = HotLock{RST: rst}
		c0, c1   time.Duration
		e0, e1   error
		stopProf func()
	)
	lbl := label("hot-lock", client, rst)
	h, err := scenario.Handover(ctx, sys, scenario.HandoverConfig{
		Waiters: cfg.Contenders - 1, Duration: cfg.Duration, Name: "floor-hot",
		OnWindow: func(open bool) {
			if open {
				stopProf = profile(t, lbl)
				c0, e0 = cpu(t.PID)
				return
			}
			c1, e1 = cpu(t.PID)
			r.TimeWait = ReadTimeWait()
			stopProf()
		},
	})
	if err != nil {
		return r, err
	}
	if e0 != nil || e1 != nil {
		return r, fmt.Errorf("server CPU: %v %v", e0, e1)
	}
	r.Grants, r.Latency, r.Failures = h.Latency.N, h.Latency, h.Failures
	r.ChangesPerSec = h.HandoffsPerSec
	if h.HandoffsPerSec > 0 {
		r.Window = time.Duration(float64(h.Latency.N) / h.HandoffsPerSec * 1e9)
	}
	r.ServerCPU = c1 - c0
	r.CPUPerGrant = r.Per(r.Grants)
	return r, nil
}

// afterIdle runs cfg.Contenders clients on one lock on t, each holding
// Idle before its close, for window, and returns the handovers' latencies.
func afterIdle(ctx context.Context, cfg Config, t Target, addr string, window time.Duration) ([]time.Duration, error) {
	var stopProf func()
	sys := batonsys.NewRawSystemAt(t.Name, addr, false)
	h, err := scenario.Handover(ctx, sys, scenario.HandoverConfig{
		Waiters: cfg.Contenders - 1, Hold: Idle, Duration: window, Name: "floor-idle", Samples: true,
		OnWindow: func(open bool) {
			if open {
				stopProf = profile(t, "after-idle")
			} else {
				stopProf()
			}
		},
	})
	return h.Samples, err
}

// claims runs cfg.Workers clients of sys (on t, releasing by reset if
// rst), each claiming its own lock on a new connection, back to back.
func claims(ctx context.Context, cfg Config, t Target, sys system.System, rst bool, client string) (Claims, error) {
	r := Claims{Workers: cfg.Workers, RST: rst}
	c0, err := cpu(t.PID)
	if err != nil {
		return r, err
	}
	stopProf := profile(t, label("claims", client, rst))
	c, err := scenario.Cycles(ctx, sys, cfg.Workers, cfg.Duration)
	stopProf()
	if err != nil {
		return r, err
	}
	c1, err := cpu(t.PID)
	if err != nil {
		return r, err
	}
	r.TimeWait = ReadTimeWait()
	r.PerSec, r.Latency, r.Failures = c.CyclesPerSec, c.Latency, c.Failures
	r.ServerCPU = c1 - c0
	r.CPUPerClaim = r.Per(c.Latency.N)
	return r, nil
}

// HeartbeatLease is every session's lease in the heartbeat figure: a
// beat every 1.25 s, 8,000 a second at 10,000 sessions, with 3.75 s of
// slack before Baton ends a session whose beats a loaded machine delays
// (with the scale scenario's 1 s leases, a shared machine at a load
// average of 20 lost thousands of sessions in the window, and their ends
// counted as heartbeat CPU).
const HeartbeatLease = 5 * time.Second

// heartbeats opens cfg.Sessions sessions on t from the load generator
// (half holders, half waiters, in pairs on one lock, each beating every
// lease/4) and divides the server's CPU over the window by the heartbeats
// answered in it.
func heartbeats(ctx context.Context, cfg Config, t Target, round int) (Heartbeat, error) {
	r := Heartbeat{Sessions: cfg.Sessions}
	lc := loadgen.Config{Addr: t.Addr, Sessions: cfg.Sessions, ShortLease: HeartbeatLease, LongLease: HeartbeatLease,
		Sources: cfg.Sessions/5000 + 1, DialPar: 200, Prefix: fmt.Sprintf("floor-%d-", round)}
	gen, ready, stop, err := scenario.StartLoadGen(ctx, cfg.LoadGen, lc)
	if err != nil {
		return r, err
	}
	defer stop()
	// On a loaded machine a few sessions can fail to open (Baton ends a
	// holder whose beats come late while thousands of others dial, and
	// its waiter is granted instead of queued); they are counted, and
	// CPU per heartbeat does not depend on the number held.
	r.Opened, r.Failed = ready.Opened, ready.Failed
	if ready.Failed > 0 {
		r.LastLoss = "open: " + ready.FirstError
	}
	if ready.Opened == 0 {
		return r, fmt.Errorf("load generator opened no session of %d: %s", cfg.Sessions, ready.FirstError)
	}
	scenario.Sleep(ctx, cfg.Settle)
	s0, err := scenario.GenStats(ctx, gen)
	if err != nil {
		return r, err
	}
	c0, err := cpu(t.PID)
	if err != nil {
		return r, err
	}
	g0, err := cpu(gen.PID())
	if err != nil {
		return r, err
	}
	stopProf := profile(t, "heartbeats")
	start := time.Now()
	scenario.Sleep(ctx, cfg.Window)
	c1, err := cpu(t.PID)
	r.Window = time.Since(start)
	stopProf()
	if err != nil {
		return r, err
	}
	g1, err := cpu(gen.PID())
	if err != nil {
		return r, err
	}
	s1, err := scenario.GenStats(ctx, gen)
	if err != nil {
		return r, err
	}
	r.Beats = s1.Heartbeats - s0.Heartbeats
	r.ServerCPU, r.LoadGenCPU = c1-c0, g1-g0
	r.LostBefore, r.Lost, r.RTT = s0.Lost, s1.Lost-s0.Lost, s1.RTT
	if s1.LastLoss != "" {
		r.LastLoss = s1.LastLoss
	}
	r.CPUPerBeat = r.Per(int(r.Beats))
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	if r.Beats == 0 {
		return r, fmt.Errorf("no heartbeat answered in %v", r.Window)
	}
	return r, nil
}

// label names a profile: "claims", "claims-rst", "hot-lock-go-rst", ...
// (the raw-wire clients' runs keep the names they had before the Go
// client's).
func label(scenario, client string, rst bool) string {
	if client != "raw-wire" {
		scenario += "-" + client
	}
	if rst {
		scenario += "-rst"
	}
	return scenario
}
