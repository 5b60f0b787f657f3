package floor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/batonlock/baton/bench/internal/batonsys"
	"github.com/batonlock/baton/bench/internal/loadgen"
	"github.com/batonlock/baton/bench/internal/scenario"
	"github.com/batonlock/baton/bench/internal/stats"
	baton "github.com/batonlock/baton/clients/go"
)

// Idle is the hold before each "after idle" handover.
const Idle = 20 * time.Millisecond

// IdleSlices is how many windows the handovers after idle of a round are
// split into, each -duration/IdleSlices long (at least minIdleSlice), the
// floor's and Baton's alternated (ABBA…), their samples pooled per
// server. Their p50 swings with the machine from one second to the next
// far more than with the server: one window of -duration each, as the
// other scenarios run, gave rounds anywhere from 0.75× to 3.5×.
const IdleSlices = 6

// minIdleSlice keeps a slice long enough for a few dozen handovers (the
// smoke run's -duration is 1 s).
const minIdleSlice = 500 * time.Millisecond

// side is one server of a round: its target and its figures.
type side struct {
	t Target
	f *Figures
}

// A Target is one server under comparison, in a process of its own.
type Target struct {
	Name string
	// Addr serves Baton's protocol (the floor lock server, or Baton).
	Addr string
	// ClaimAddr takes the uncontended claims: the bare server for the
	// floor, Baton itself for Baton.
	ClaimAddr string
	// PID is the server process, whose CPU time /proc gives.
	PID int
	// Everywhere: the server listens on every address (Addr and
	// ClaimAddr give its ports on 127.0.0.1), so each run of the
	// comparison dials it at a loopback address of its own (Fresh).
	Everywhere bool
	// Profile, if set, starts a CPU profile of the process for the
	// scenario label and returns the function that ends it.
	Profile func(label string) (stop func())
}

// Config sizes the comparison.
type Config struct {
	Contenders int           // clients on the hot lock
	Duration   time.Duration // window of the hot lock, the idle handovers and the claims
	Workers    int           // uncontended claimers
	Sessions   int           // held sessions of the heartbeat figure
	Settle     time.Duration // after the sessions opened, before the heartbeat window
	Window     time.Duration // the heartbeat window
	// Rounds repeats every scenario, the floor and Baton in turn (floor
	// first in odd rounds, Baton first in even ones); the table gives
	// medians. 0 is 1.
	Rounds int
	// LoadGen is the command line of the load generator (the bench
	// binary in its load role), a process of its own.
	LoadGen func(loadgen.Config) (string, []string)
}

// Result is one run of the comparison: the same scenarios, the same
// clients, against the floor and against Baton.
type Result struct {
	Contenders int           `json:"contenders"`
	Idle       time.Duration `json:"idle_ns"`
	Rounds     []Round       `json:"rounds"`
	// RealNetwork is the claims and hot-lock pairs with tcp_tw_reuse=0,
	// or nil (a run from before them).
	RealNetwork *RealNetwork `json:"real_network,omitempty"`
	// Profiles are the files of the CPU profiles taken in this run, in
	// its first round (scenario label -> path), if any.
	Profiles map[string]string `json:"profiles,omitempty"`
}

// Round is one pass of every scenario over both servers.
type Round struct {
	Floor Figures `json:"floor"`
	Baton Figures `json:"baton"`
}

// Figures are one server's.
type Figures struct {
	System    string        `json:"system"`
	HotLock   HotLock       `json:"hot_lock"`
	AfterIdle stats.Summary `json:"after_idle"`
	Heartbeat Heartbeat     `json:"heartbeat"`
	Claims    Claims        `json:"claims"`
	ClaimsRST Claims        `json:"claims_rst"`
	// HotLockRST is HotLock with every client releasing by reset.
	HotLockRST HotLock `json:"hot_lock_rst"`
	// GoClient is Baton's alone: the claims and the hot lock again with
	// the Go client, which releases by reset unless WithNormalClose.
	GoClient *GoClient `json:"go_client,omitempty"`
}

// GoClient are the uncontended claims and the hot lock with the Go
// client (github.com/batonlock/baton/clients/go) instead of the raw-wire clients,
// with a normal close (WithNormalClose) and with its default, the reset.
type GoClient struct {
	Claims     Claims  `json:"claims"`
	ClaimsRST  Claims  `json:"claims_rst"`
	HotLock    HotLock `json:"hot_lock"`
	HotLockRST HotLock `json:"hot_lock_rst"`
}

// HotLock is Contenders clients on one lock, each re-queuing as soon as
// it lets go.
type HotLock struct {
	RST    bool          `json:"rst"`
	Grants int           `json:"grants"`
	Window time.Duration `json:"window_ns"`
	scenario.Cost
	CPUPerGrant   time.Duration `json:"cpu_per_grant_ns"`
	ChangesPerSec float64       `json:"owner_changes_per_sec"`
	// Latency is close -> push read, back to back.
	Latency stats.Summary `json:"latency"`
	scenario.Failures
	// TimeWait is the machine's TIME_WAIT count as the window closed.
	TimeWait TimeWait `json:"time_wait"`
}

// Heartbeat is the server's CPU per heartbeat with Sessions held sessions
// heartbeating from the load generator.
type Heartbeat struct {
	Sessions int           `json:"sessions"`
	Opened   int           `json:"opened"`
	Failed   int           `json:"failed"`
	Beats    int64         `json:"beats"`
	Window   time.Duration `json:"window_ns"`
	scenario.Cost
	CPUPerBeat time.Duration `json:"cpu_per_heartbeat_ns"`
	LoadGenCPU time.Duration `json:"loadgen_cpu_ns"`
	// LostBefore counts sessions lost before the window (while opening
	// and settling), Lost those lost in it; LastLoss is the last reason.
	LostBefore int64  `json:"lost_before"`
	Lost       int64  `json:"lost"`
	LastLoss   string `json:"last_loss,omitempty"`
	// RTT is the load generator's heartbeat round trip in the window.
	RTT stats.Summary `json:"rtt"`
}

// Claims is Workers clients each claiming its own lock on a new
// connection and releasing it, back to back.
type Claims struct {
	Workers int           `json:"workers"`
	RST     bool          `json:"rst"`
	PerSec  float64       `json:"per_sec"`
	Latency stats.Summary `json:"latency"`
	scenario.Cost
	CPUPerClaim time.Duration `json:"cpu_per_claim_ns"`
	scenario.Failures
	// TimeWait is the machine's TIME_WAIT count at the end of the run.
	TimeWait TimeWait `json:"time_wait"`
}

// RealNetwork is the Go client's uncontended claims and hot lock on
// Baton with a normal close and with the reset, client and server in a
// network namespace of the bench's own (one per run) with
// net.ipv4.tcp_tw_reuse=0: what a connection between two hosts gets,
// where Linux's default (2) reuses no TIME_WAIT port. A normal close
// then leaves the client's port for one server address in TIME_WAIT for
// a minute, and once all of them are (28,232 with the default port
// range) every connect fails until the oldest expire. Measured once per
// run, outside the rounds, when the bench runs as root with ip(8); else
// Skipped says why (and HotLockSkipped why the hot lock's pair, run
// after the claims', is missing).
type RealNetwork struct {
	Skipped   string        `json:"skipped,omitempty"`
	Window    time.Duration `json:"window_ns"`
	Claims    Claims        `json:"claims"`
	ClaimsRST Claims        `json:"claims_rst"`
	// The hot lock: Contenders Go clients on one lock, each grant a new
	// connection, HotLockWindow each.
	HotLockSkipped string        `json:"hot_lock_skipped,omitempty"`
	Contenders     int           `json:"contenders,omitempty"`
	HotLockWindow  time.Duration `json:"hot_lock_window_ns,omitempty"`
	HotLock        HotLock       `json:"hot_lock"`
	HotLockRST     HotLock       `json:"hot_lock_rst"`
}

// GoClientHotLock runs the hot lock of the comparison with the Go
// client on t (contenders clients on one lock for window, releasing by
// reset if rst): the bench's hot-lock role runs it in a network
// namespace (RealNetwork). t.PID's CPU is read over the window, and the
// TIME_WAIT count is this process's network namespace's.
func GoClientHotLock(ctx context.Context, t Target, contenders int, window time.Duration, rst bool) (HotLock, error) {
	cfg := Config{Contenders: contenders, Duration: window}
	return hotLock(ctx, cfg, t, goClient(t, t.Addr, rst), rst, "go")
}

// Compare runs every scenario against the floor and Baton, the runs of a
// scenario next to each other so that they share the machine's mood, and
// cfg.Rounds times. logf reports progress.
func Compare(ctx context.Context, cfg Config, floor, baton Target, logf func(string, ...any)) (Result, error) {
	res := Result{Contenders: cfg.Contenders, Idle: Idle, Rounds: make([]Round, max(1, cfg.Rounds))}
	for i := range res.Rounds {
		res.Rounds[i] = Round{Floor: Figures{System: floor.Name}, Baton: Figures{System: baton.Name, GoClient: &GoClient{}}}
	}
	// A random start: the runs of a bench started within a minute of
	// another's do not dial the addresses whose TIME_WAIT sockets it left.
	c := &comparison{ctx: ctx, cfg: cfg, fresh: Fresh{n: rand.IntN(200) * 250}, logf: logf}
	for _, step := range c.steps() {
		for i := range res.Rounds {
			logf("floor: %s, round %d of %d", step.name, i+1, len(res.Rounds))
			sides := [2]side{{floor, &res.Rounds[i].Floor}, {baton, &res.Rounds[i].Baton}}
			if i%2 == 1 {
				sides[0], sides[1] = sides[1], sides[0]
			}
			if i > 0 {
				sides[0].t.Profile, sides[1].t.Profile = nil, nil // one profile per scenario: the first round's
			}
			if err := c.round(step, sides, i, baton.Name); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// comparison is one run of Compare: what its steps share.
type comparison struct {
	ctx   context.Context
	cfg   Config
	fresh Fresh
	logf  func(string, ...any)
}

// compareStep is one scenario of the comparison.
type compareStep struct {
	name      string
	batonOnly bool
	run       func(t Target, f *Figures, round int) error
	// both, instead of run, runs the scenario for both sides at once
	// (in the round's order).
	both func(sides [2]side) error
}

// steps are the comparison's scenarios, in their order.
func (c *comparison) steps() []compareStep {
	return []compareStep{
		{"hot lock, normal close and RST release", false, c.hotLock, nil},
		{name: "handover after idle", both: c.afterIdle},
		{"uncontended claims, normal close and RST release", false, c.claims, nil},
		{"Go client: claims and hot lock, normal close and RST release", true, c.goClient, nil},
		{"heartbeats", false, c.heartbeats, nil},
	}
}

// round runs one round of step over both sides, in their order; a side
// that is not batonName's is left out of a Baton-only step.
func (c *comparison) round(step compareStep, sides [2]side, round int, batonName string) error {
	if step.both != nil {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		if err := step.both(sides); err != nil {
			return fmt.Errorf("%s, %w", step.name, err)
		}
		return nil
	}
	for _, sd := range sides {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		t := sd.t
		if step.batonOnly && t.Name != batonName {
			continue
		}
		if err := step.run(t, sd.f, round); err != nil {
			return fmt.Errorf("%s, %s: %w", step.name, t.Name, err)
		}
	}
	return nil
}

func (c *comparison) logHot(t Target, how string, h HotLock) {
	c.logf("  %s, %s: %d grants, %.0f owner changes/s, %s server CPU per grant, close → push p50 %s; %v",
		t.Name, how, h.Grants, h.ChangesPerSec, dur(h.CPUPerGrant), dur(h.Latency.P50), h.TimeWait)
}

func (c *comparison) logClaims(t Target, how string, cl Claims) {
	c.logf("  %s, %s: %.0f claims/s, %s server CPU per claim, p50 %s; %v", t.Name, how, cl.PerSec, dur(cl.CPUPerClaim), dur(cl.Latency.P50), cl.TimeWait)
}

// hotLock is the hot lock of raw-wire clients, with a normal close and
// with the reset.
func (c *comparison) hotLock(t Target, f *Figures, round int) error {
	return releases(round, func(rst bool) error {
		sys := batonsys.NewRawSystemAt(t.Name, c.fresh.Addr(t, t.Addr), rst)
		h, err := hotLock(c.ctx, c.cfg, t, sys, rst, "raw-wire")
		if err == nil {
			c.logHot(t, ReleaseName(rst), h)
			*Pick(rst, &f.HotLock, &f.HotLockRST) = h
		}
		return err
	})
}

// afterIdle is the handover after Idle, both sides in alternated slices
// whose samples are pooled.
func (c *comparison) afterIdle(sides [2]side) error {
	var pooled [2][]time.Duration
	slice := max(c.cfg.Duration/IdleSlices, minIdleSlice)
	for j := range IdleSlices {
		order := [2]int{0, 1}
		if j%2 == 1 {
			order = [2]int{1, 0}
		}
		for _, k := range order {
			t := sides[k].t
			if j > 0 {
				t.Profile = nil // the first slice's profile only
			}
			samples, err := afterIdle(c.ctx, c.cfg, t, c.fresh.Addr(t, t.Addr), slice)
			if err != nil {
				return fmt.Errorf("%s: %w", t.Name, err)
			}
			pooled[k] = append(pooled[k], samples...)
		}
	}
	for k, sd := range sides {
		sd.f.AfterIdle = stats.Summarize(pooled[k])
		c.logf("  %s: close → push after %v idle p50 %s p99 %s (%d in %d windows)", sd.t.Name, Idle, dur(sd.f.AfterIdle.P50), dur(sd.f.AfterIdle.P99), sd.f.AfterIdle.N, IdleSlices)
	}
	return nil
}

// claims are the uncontended claims of raw-wire clients, with a normal
// close and with the reset.
func (c *comparison) claims(t Target, f *Figures, round int) error {
	return releases(round, func(rst bool) error {
		sys := batonsys.NewRawSystemAt(t.Name, c.fresh.Addr(t, t.ClaimAddr), rst)
		cl, err := claims(c.ctx, c.cfg, t, sys, rst, "raw-wire")
		if err == nil {
			c.logClaims(t, ReleaseName(rst), cl)
			*Pick(rst, &f.Claims, &f.ClaimsRST) = cl
		}
		return err
	})
}

// goClient is the claims and the hot lock again with the Go client.
func (c *comparison) goClient(t Target, f *Figures, round int) error {
	g := f.GoClient
	if err := releases(round, func(rst bool) error {
		cl, err := claims(c.ctx, c.cfg, t, goClient(t, c.fresh.Addr(t, t.ClaimAddr), rst), rst, "go")
		if err == nil {
			c.logClaims(t, "Go client, "+ReleaseName(rst), cl)
			*Pick(rst, &g.Claims, &g.ClaimsRST) = cl
		}
		return err
	}); err != nil {
		return err
	}
	return releases(round, func(rst bool) error {
		h, err := hotLock(c.ctx, c.cfg, t, goClient(t, c.fresh.Addr(t, t.Addr), rst), rst, "go")
		if err == nil {
			c.logHot(t, "Go client, "+ReleaseName(rst), h)
			*Pick(rst, &g.HotLock, &g.HotLockRST) = h
		}
		return err
	})
}

// heartbeats is the server's CPU per heartbeat of cfg.Sessions held
// sessions.
func (c *comparison) heartbeats(t Target, f *Figures, round int) error {
	var err error
	f.Heartbeat, err = heartbeats(c.ctx, c.cfg, t, round)
	if err == nil {
		c.logf("  %s: %d sessions, %d heartbeats in %v, %s server CPU each, round trip p50 %s p99 %s; sessions lost %d before the window, %d in it (last: %s)", t.Name, f.Heartbeat.Opened,
			f.Heartbeat.Beats, f.Heartbeat.Window.Round(time.Millisecond), dur(f.Heartbeat.CPUPerBeat), dur(f.Heartbeat.RTT.P50), dur(f.Heartbeat.RTT.P99), f.Heartbeat.LostBefore, f.Heartbeat.Lost, f.Heartbeat.LastLoss)
	}
	return err
}

// releases runs one scenario with a normal close and with an RST release,
// one after the other: the reset first in odd rounds (round 0, 2, ...
// counted from 0), the normal close first in even ones, so that neither
// always runs on a machine the other has just warmed or loaded.
func releases(round int, run func(rst bool) error) error {
	for _, rst := range []bool{round%2 == 0, round%2 != 0} {
		if err := run(rst); err != nil {
			return fmt.Errorf("%s: %w", ReleaseName(rst), err)
		}
	}
	return nil
}

// ReleaseName names the release: by reset, or a normal close.
func ReleaseName(rst bool) string {
	if rst {
		return "RST release"
	}
	return "normal close"
}

// Pick is normal, or withRST if rst.
func Pick[T any](rst bool, normal, withRST *T) *T {
	if rst {
		return withRST
	}
	return normal
}

// goClient is the Go client against t at addr: its default, the reset
// release, or a normal close. The lease is long enough that no heartbeat
// falls in a claim; the hot lock's clients beat as they wait.
func goClient(t Target, addr string, rst bool) *batonsys.System {
	return batonsys.NewSystemAt(t.Name+"-go", addr, 10*time.Second, baton.WithNormalClose(!rst))
}

// Fresh hands each run of the comparison a loopback address of its own
// to dial a server that listens on every address: 127.42.x.y, counting
// up from where n starts (all of 127.0.0.0/8 is loopback). A normal close
// leaves the client's side of every connection in TIME_WAIT for a minute,
// tens of thousands of sockets after a run of claims; a later run to the
// same address and port would search past them for a free local port on
// every dial (with 127.0.0.1 the RST runs after a normal-close run
// measured that search, not the reset). A new destination address makes
// every local port free again for the kernel's check of the connection's
// four addresses, so each run's dials pay only for the sockets it leaves
// itself.
type Fresh struct{ n int }

// Addr is addr (host:port) with a loopback host not handed out before,
// or addr itself if t does not listen everywhere.
func (f *Fresh) Addr(t Target, addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if !t.Everywhere || err != nil {
		return addr
	}
	f.n++
	return net.JoinHostPort(fmt.Sprintf("127.42.%d.%d", f.n/250, f.n%250+1), port)
}

func dur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.1f µs", float64(d)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}
