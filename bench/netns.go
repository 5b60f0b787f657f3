package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/internal/batonsys"
	"github.com/batonlock/baton/bench/internal/floor"
	"github.com/batonlock/baton/bench/internal/proc"
	"github.com/batonlock/baton/bench/internal/report"
	"github.com/batonlock/baton/bench/internal/scenario"
	baton "github.com/batonlock/baton/clients/go"
)

// claimsOutput is what the claims role prints: its run, and the
// TIME_WAIT count of its network namespace at the end.
type claimsOutput struct {
	Cycles   scenario.CyclesResult `json:"cycles"`
	TimeWait floor.TimeWait        `json:"time_wait"`
}

// runClaims is the claims role: -workers Go clients each claiming its own
// lock on -addr back to back for -duration, releasing by reset, or with
// -normal-close by a normal close. The floor scenario runs it inside a
// network namespace, where the bench itself is not. It prints one line of
// JSON (claimsOutput).
func runClaims(ctx context.Context, o *options, stdout, stderr io.Writer) int {
	if o.addr == "" || o.workers < 1 || o.duration <= 0 {
		fmt.Fprintf(stderr, "bench claims: need -addr, -workers and -duration, got %q, %d, %v\n", o.addr, o.workers, o.duration)
		return 2
	}
	sys := batonsys.NewSystemAt("baton-go", o.addr, 10*time.Second, baton.WithNormalClose(o.normalClose))
	c, err := scenario.Cycles(ctx, sys, o.workers, o.duration)
	return printResult(stdout, stderr, "bench claims", claimsOutput{Cycles: c, TimeWait: floor.ReadTimeWait()}, err)
}

// runHotLock is the hot-lock role: -workers Go clients on one lock on
// -addr, each re-queuing as soon as it lets go, for a -duration window,
// releasing by reset or, with -normal-close, by a normal close; the
// server's CPU over the window is read from -server-pid's. The floor
// scenario runs it inside a network namespace. It prints one line of
// JSON (floor.HotLock, with the namespace's TIME_WAIT count as the
// window closed).
func runHotLock(ctx context.Context, o *options, stdout, stderr io.Writer) int {
	if o.addr == "" || o.workers < 2 || o.duration <= 0 || o.serverPID <= 0 {
		fmt.Fprintf(stderr, "bench hotlock: need -addr, -workers of 2 or more, -duration and -server-pid, got %q, %d, %v, %d\n", o.addr, o.workers, o.duration, o.serverPID)
		return 2
	}
	t := floor.Target{Name: "baton", Addr: o.addr, PID: o.serverPID}
	h, err := floor.GoClientHotLock(ctx, t, o.workers, o.duration, !o.normalClose)
	return printResult(stdout, stderr, "bench hotlock", h, err)
}

// printResult ends a role that measured v: its one line of JSON on
// stdout, or err (the run's, else the encoder's) on stderr; it returns
// the exit code.
func printResult(stdout, stderr io.Writer, role string, v any, err error) int {
	if err == nil {
		err = json.NewEncoder(stdout).Encode(v)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", role, err)
		return 1
	}
	return 0
}

// realNetworkWindow is each run's window of the real-network claims: long
// enough for a normal close, whose rate falls as the ports fill (about
// 1,500 claims/s on average here), to put the 28,232 ports of the default
// range in TIME_WAIT, with both runs and their set-up under a minute (15 s
// windows fell short of the ceiling in one run of two).
const realNetworkWindow = 20 * time.Second

// realNetworkHotWindow is each run's window of the real-network hot
// lock. Every grant is a new connection, so a normal close puts the
// 28,232 ports in TIME_WAIT within 28,232 grants: 4.5 s at loopback's
// 6,300 owner changes/s here, 7.5 s at the 3,800/s the reset made in the
// namespace on a loaded machine (one run: the normal close stopped at
// 28,225 grants, its namespace at 28,230 TIME_WAIT sockets). 20 s, as the
// claims', keeps a margin of 2.5× for a busier machine; the four runs
// and their set-up took 83 s.
const realNetworkHotWindow = 20 * time.Second

// realNetwork measures floor.RealNetwork: the Go client's claims, then
// its hot lock of contenders clients, each with a reset and with a
// normal close, each run with client and server in a network namespace
// of its own that has tcp_tw_reuse=0. It needs root and ip(8); without
// them it says so and is skipped. Each namespace is deleted before the
// next is made, whatever happened in it.
func realNetwork(ctx context.Context, o *options, exe, bin string, workers, contenders int, logf func(string, ...any)) *floor.RealNetwork {
	window, hotWindow := realNetworkWindow, realNetworkHotWindow
	if o.smoke {
		window, hotWindow = o.duration, o.duration
	}
	rn := &floor.RealNetwork{Window: window, Contenders: contenders, HotLockWindow: hotWindow}
	ip, err := exec.LookPath("ip")
	switch {
	case os.Geteuid() != 0:
		rn.Skipped = "not root: a network namespace needs root"
	case err != nil:
		rn.Skipped = "no ip(8) (iproute2) to make a network namespace"
	}
	if rn.Skipped != "" {
		logf("floor: claims and hot lock with tcp_tw_reuse=0 in a network namespace skipped: %s", rn.Skipped)
		return rn
	}
	// Under 100 s in a full run: the windows, and for each of the four
	// runs a namespace, a server and the clients' set-up and drain.
	ctx, cancel := context.WithTimeout(ctx, 2*window+2*hotWindow+20*time.Second)
	defer cancel()
	for _, rst := range []bool{true, false} {
		logf("floor: Go client claims in a network namespace with tcp_tw_reuse=0, %s, %v", floor.ReleaseName(rst), window)
		c, err := claimsInNetns(ctx, ip, exe, bin, workers, window, rst, logf)
		if err != nil {
			rn.Skipped = fmt.Sprintf("%s: %v", floor.ReleaseName(rst), err)
			logf("floor: claims in a network namespace failed, %s", rn.Skipped)
			return rn
		}
		logf("  baton, Go client, %s: %.0f claims/s, %s server CPU per claim, p50 %s, %d failed (last: %s); %v in the namespace",
			floor.ReleaseName(rst), c.PerSec, report.Dur(c.CPUPerClaim), report.Dur(c.Latency.P50), c.Errors, c.LastError, c.TimeWait)
		*floor.Pick(rst, &rn.Claims, &rn.ClaimsRST) = c
	}
	for _, rst := range []bool{true, false} {
		logf("floor: Go client hot lock, %d contenders, in a network namespace with tcp_tw_reuse=0, %s, %v", contenders, floor.ReleaseName(rst), hotWindow)
		h, err := hotLockInNetns(ctx, ip, exe, bin, contenders, hotWindow, rst, logf)
		if err != nil {
			rn.HotLockSkipped = fmt.Sprintf("%s: %v", floor.ReleaseName(rst), err)
			logf("floor: hot lock in a network namespace failed, %s", rn.HotLockSkipped)
			return rn
		}
		logf("  baton, Go client, hot lock, %s: %d grants, %.0f owner changes/s, %s server CPU per grant, close → push p50 %s, %d failed (last: %s); %v in the namespace",
			floor.ReleaseName(rst), h.Grants, h.ChangesPerSec, report.Dur(h.CPUPerGrant), report.Dur(h.Latency.P50), h.Errors, h.LastError, h.TimeWait)
		*floor.Pick(rst, &rn.HotLock, &rn.HotLockRST) = h
	}
	return rn
}

// claimsInNetns runs the claims role against Baton in a network
// namespace of its own.
func claimsInNetns(ctx context.Context, ip, exe, bin string, workers int, window time.Duration, rst bool, logf func(string, ...any)) (c floor.Claims, err error) {
	c = floor.Claims{Workers: workers, RST: rst}
	err = inNetns(ctx, ip, "claims", bin, rst, logf, func(ns string, srv *batonsys.Server) error {
		args := []string{"netns", "exec", ns, exe, "-role", "claims", "-addr", srv.Addr,
			"-workers", fmt.Sprint(workers), "-duration", window.String()}
		if !rst {
			args = append(args, "-normal-close")
		}
		c0, err := batonsys.ProcessCPU(srv.PID())
		if err != nil {
			return err
		}
		line, err := roleLine(ctx, ip, args)
		if err != nil {
			return err
		}
		c1, err := batonsys.ProcessCPU(srv.PID())
		if err != nil {
			return err
		}
		var out claimsOutput
		if err := json.Unmarshal([]byte(line), &out); err != nil {
			return fmt.Errorf("claims role: %q: %w", line, err)
		}
		r := out.Cycles
		c.PerSec, c.Latency, c.Failures, c.TimeWait = r.CyclesPerSec, r.Latency, r.Failures, out.TimeWait
		c.ServerCPU = c1 - c0
		c.CPUPerClaim = c.Per(r.Latency.N)
		return nil
	})
	return c, err
}

// hotLockInNetns runs the hot-lock role against Baton in a network
// namespace of its own; the role reads the server's CPU over its window.
func hotLockInNetns(ctx context.Context, ip, exe, bin string, contenders int, window time.Duration, rst bool, logf func(string, ...any)) (h floor.HotLock, err error) {
	h = floor.HotLock{RST: rst}
	err = inNetns(ctx, ip, "hot", bin, rst, logf, func(ns string, srv *batonsys.Server) error {
		args := []string{"netns", "exec", ns, exe, "-role", "hotlock", "-addr", srv.Addr,
			"-workers", fmt.Sprint(contenders), "-duration", window.String(), "-server-pid", fmt.Sprint(srv.PID())}
		if !rst {
			args = append(args, "-normal-close")
		}
		line, err := roleLine(ctx, ip, args)
		if err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(line), &h); err != nil {
			return fmt.Errorf("hot-lock role: %q: %w", line, err)
		}
		return nil
	})
	return h, err
}

// roleLine runs ip with args (a role of the bench in a namespace) and
// returns the one line it prints.
func roleLine(ctx context.Context, ip string, args []string) (string, error) {
	p, err := proc.Start(ip, args...)
	if err != nil {
		return "", err
	}
	defer p.Stop(5 * time.Second)
	return p.ReadLine(ctx)
}

// inNetns makes a network namespace with tcp_tw_reuse=0 named after what
// and the release, starts Baton in it, calls run, and stops the server
// and deletes the namespace again, whatever happened.
func inNetns(ctx context.Context, ip, what, bin string, rst bool, logf func(string, ...any), run func(ns string, srv *batonsys.Server) error) error {
	mode := "normal"
	if rst {
		mode = "rst"
	}
	ns := fmt.Sprintf("baton-bench-%d-%s-%s", os.Getpid(), what, mode)
	cmd := func(args ...string) error {
		out, err := exec.CommandContext(ctx, ip, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := cmd("netns", "add", ns); err != nil {
		return err
	}
	defer func() {
		// Not ctx: the namespace goes even when the run was cut short.
		if out, derr := exec.Command(ip, "netns", "del", ns).CombinedOutput(); derr != nil {
			logf("floor: ip netns del %s: %v: %s", ns, derr, out)
		}
	}()
	if err := cmd("netns", "exec", ns, "ip", "link", "set", "lo", "up"); err != nil {
		return err
	}
	if err := cmd("netns", "exec", ns, "sh", "-c", "echo 0 > /proc/sys/net/ipv4/tcp_tw_reuse"); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "bench-netns-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := batonsys.StartServerIn(ctx, ns, bin, dir)
	if err != nil {
		return err
	}
	defer srv.Stop()
	return run(ns, srv)
}
