package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/batonlock/baton/bench/internal/baseline"
	"github.com/batonlock/baton/bench/internal/floor"
	"github.com/batonlock/baton/bench/internal/loadgen"
	"github.com/batonlock/baton/bench/internal/profsig"
)

// runEcho is the baseline's echo server: a process of its own, like the
// lock servers, so the baseline pays the same process boundary.
// It also serves the close-notify baseline on a second port; its first
// line of output is "ECHO_ADDR CLOSE_NOTIFY_ADDR".
func runEcho(ctx context.Context, stdout, stderr io.Writer) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(stderr, "bench echo: %v\n", err)
		return 1
	}
	cn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		fmt.Fprintf(stderr, "bench echo: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, ln.Addr().String(), cn.Addr().String())
	go func() { <-ctx.Done(); ln.Close(); cn.Close() }()
	notified := make(chan error, 1)
	go func() { notified <- baseline.ServeCloseNotify(cn) }()
	err = baseline.Serve(ln)
	cn.Close()
	if nerr := <-notified; err == nil {
		err = nerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench echo: %v\n", err)
		return 1
	}
	return 0
}

// runFloor is the floor of the floor scenario: the minimal lock server
// and the bare accept/reply/close server, in a process of their own as
// Baton is, so that each server's CPU time is its own. Its first line of
// output is "LOCK_ADDR BARE_ADDR".
func runFloor(ctx context.Context, stdout, stderr io.Writer) int {
	loadgen.RaiseNoFile() // a descriptor per held session
	profsig.Install()
	// No TCP keepalive on accepted connections (Go's default sets four
	// socket options per accept for it): the model has no use for it, so
	// the floor does not pay for it.
	lc := net.ListenConfig{KeepAlive: -1}
	// Every address, as Baton's in this scenario, so that each run dials
	// the floor at a loopback address of its own (floor.Fresh); the
	// addresses printed are the ports on 127.0.0.1.
	lk, err := lc.Listen(ctx, "tcp4", "0.0.0.0:0")
	if err != nil {
		fmt.Fprintf(stderr, "bench floor: %v\n", err)
		return 1
	}
	bare, err := lc.Listen(ctx, "tcp4", "0.0.0.0:0")
	if err != nil {
		lk.Close()
		fmt.Fprintf(stderr, "bench floor: %v\n", err)
		return 1
	}
	loopback := func(ln net.Listener) string {
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	}
	fmt.Fprintln(stdout, loopback(lk), loopback(bare))
	go func() { <-ctx.Done(); lk.Close(); bare.Close() }()
	served := make(chan error, 1)
	go func() { served <- (&floor.BareServer{}).Serve(bare) }()
	err = floor.NewLockServer().Serve(lk)
	bare.Close()
	if berr := <-served; err == nil {
		err = berr
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench floor: %v\n", err)
		return 1
	}
	return 0
}

// runLoad is the scale scenario's load generator.
func runLoad(ctx context.Context, o *options, stdin io.Reader, stdout, stderr io.Writer) int {
	if o.addr == "" || o.sessions < 2 {
		fmt.Fprintf(stderr, "bench load: need -addr and -sessions of 2 or more, got %q and %d\n", o.addr, o.sessions)
		return 2
	}
	err := loadgen.Run(ctx, loadgen.Config{Addr: o.addr, Sessions: o.sessions, ShortLease: o.shortLease,
		LongLease: o.longLease, Sources: o.sources, DialPar: o.dialPar, Prefix: o.prefix, Version: o.scaleVersion}, stdin, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "bench load: %v\n", err)
		return 1
	}
	return 0
}
