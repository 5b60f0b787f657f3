// Package batontest holds test helpers: a real server on 127.0.0.1:0, a raw
// wire client, Eventually, a clock that suspends, and a buffer a running
// process writes while the test reads it. It is imported only
// by tests.
package batontest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/clock"
	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/tokenstore"
	"github.com/batonlock/baton/server"
)

// Server is a running Baton server for a test.
type Server struct {
	Addr    string // protocol address, 127.0.0.1:port
	Srv     *server.Server
	DataDir string
	// Store is the token store of the running server's data directory.
	Store *tokenstore.Store
	// GraceMax caps the crash grace and the leases that get a credential
	// (baton serve's -crash-grace-max); a minute, as there.
	GraceMax time.Duration

	mutate []func(*server.Config)
	served chan error
}

// StartServer starts a server on 127.0.0.1:0 with a fresh data directory;
// mutate may change its Config. t.Cleanup shuts it down.
func StartServer(t testing.TB, mutate ...func(*server.Config)) *Server {
	t.Helper()
	s := &Server{DataDir: t.TempDir(), mutate: mutate, GraceMax: time.Minute}
	s.start(t, "127.0.0.1:0")
	t.Cleanup(func() { s.shutdown(t) })
	return s
}

func (s *Server) start(t testing.TB, addr string) {
	t.Helper()
	store, err := tokenstore.Open(s.DataDir)
	if err != nil {
		t.Fatalf("open token store: %v", err)
	}
	cfg := server.DefaultConfig()
	// Tests open thousands of sessions from 127.0.0.1 alone; those of the
	// caps set them.
	cfg.MaxConnsPerIP, cfg.MaxConnsPerIdentity = 0, 0
	cfg.NextToken = store.Next
	// Protocol version 3, as baton serve speaks it: resume-key, tickets,
	// the claims a stop listed, the crash grace of a restart.
	if _, err := server.ConfigureStandalone(&cfg, store, s.GraceMax); err != nil {
		t.Fatalf("version 3 state of %s: %v", s.DataDir, err)
	}
	for _, m := range s.mutate {
		m(&cfg)
	}
	if _, ok := cfg.Leases.(durableMarker); ok {
		cfg.Leases = store
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	var ln net.Listener
	// On Restart the old port may linger briefly; retry the bind.
	for deadline := time.Now().Add(5 * time.Second); ; {
		ln, err = server.Listen(context.Background(), cfg, addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	s.Addr = ln.Addr().String()
	s.Srv = srv
	s.Store = store
	s.served = make(chan error, 1)
	go func() { s.served <- srv.Serve(ln) }()
}

// durableMarker is the Leases of DurableLeases, which start replaces with
// the token store.
type durableMarker struct{}

func (durableMarker) NoteLease(time.Duration) error {
	return errors.New("batontest: DurableLeases not replaced")
}

// DurableLeases makes the server record the longest lease in its data
// directory (lease-bound), as baton serve does, so that a start after
// Crash waits for the claims of the run before.
func DurableLeases(c *server.Config) { c.Leases = durableMarker{} }

// Crash stops the server as a crash would leave its data directory: no
// list of claims, no mark of a clean stop (its sessions are still told
// SHUTDOWN, which a crash would not tell them). Start starts it again.
func (s *Server) Crash(t testing.TB) {
	t.Helper()
	s.stop(t, false)
}

// Start starts a server stopped by Crash (or Stop) again, on the same
// address and data directory.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	s.start(t, s.Addr)
}

func (s *Server) shutdown(t testing.TB) {
	t.Helper()
	s.stop(t, true)
}

func (s *Server) stop(t testing.TB, clean bool) {
	t.Helper()
	if s.Srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Srv.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if err := <-s.served; !errors.Is(err, server.ErrServerClosed) {
		t.Errorf("Serve returned %v, want ErrServerClosed", err)
	}
	if !clean {
		s.Srv = nil
		return
	}
	// As baton serve: the claims the stop listed, then the clean mark.
	if l := s.Srv.HandoverList(); l != nil {
		if err := s.Store.WriteResumeList(server.EncodeHandover(l, 0)[0]); err != nil {
			t.Errorf("write the resume list: %v", err)
		}
	}
	if err := s.Store.MarkClean(); err != nil {
		t.Errorf("mark the clean stop: %v", err)
	}
	s.Srv = nil
}

// Stop shuts the server down in a controlled way: every session gets ERROR
// SHUTDOWN.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.shutdown(t)
}

// Restart stops the server and starts a new one on the same address and
// data directory.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.shutdown(t)
	s.start(t, s.Addr)
}

// Conn is a raw protocol client for tests: it sends frames and reads them
// back one at a time.
type Conn struct {
	t    testing.TB
	Conn net.Conn
}

// Dial connects to addr; t.Cleanup closes the connection.
func Dial(t testing.TB, addr string) *Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return &Conn{t: t, Conn: nc}
}

// Write sends raw bytes.
func (c *Conn) Write(b []byte) {
	c.t.Helper()
	if _, err := c.Conn.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// Acquire sends an ACQUIRE.
func (c *Conn) Acquire(name string, lease time.Duration, noWait bool, owner string) {
	c.t.Helper()
	a := wire.Acquire{Version: wire.Version, LeaseMs: uint32(lease / time.Millisecond), Name: name, Owner: owner}
	if noWait {
		a.Flags = wire.FlagNoWait
	}
	b, err := wire.AppendAcquire(nil, a)
	if err != nil {
		c.t.Fatalf("encode ACQUIRE: %v", err)
	}
	c.Write(b)
}

// AcquireV2 sends a protocol version 2 ACQUIRE: a shared claim with limit,
// or (shared false, limit 1) an exclusive one.
func (c *Conn) AcquireV2(name string, lease time.Duration, shared bool, limit uint16, noWait bool, owner string) {
	c.t.Helper()
	a := wire.Acquire{Version: wire.Version2, LeaseMs: uint32(lease / time.Millisecond), Limit: limit, Name: name, Owner: owner}
	if noWait {
		a.Flags |= wire.FlagNoWait
	}
	if shared {
		a.Flags |= wire.FlagShared
	}
	b, err := wire.AppendAcquire(nil, a)
	if err != nil {
		c.t.Fatalf("encode ACQUIRE: %v", err)
	}
	c.Write(b)
}

// AcquireV3 sends a protocol version 3 ACQUIRE of a new claim: shared with
// limit, or (shared false, limit 1) exclusive.
func (c *Conn) AcquireV3(name string, lease time.Duration, shared bool, limit uint16, noWait bool, owner string) {
	c.t.Helper()
	a := wire.Acquire{Version: wire.Version3, LeaseMs: uint32(lease / time.Millisecond), Limit: limit, Name: name, Owner: owner}
	if noWait {
		a.Flags |= wire.FlagNoWait
	}
	if shared {
		a.Flags |= wire.FlagShared
	}
	b, err := wire.AppendAcquire(nil, a)
	if err != nil {
		c.t.Fatalf("encode ACQUIRE: %v", err)
	}
	c.Write(b)
}

// Claim is what a raw client of version 3 keeps of a claim to resume it.
type Claim struct {
	Name       string
	Lease      time.Duration
	Shared     bool
	Limit      uint16 // 1 for an exclusive claim
	Held       bool   // ID is a token; else a ticket
	ID         uint64
	Generation uint32
	Credential wire.Credential
	Attempt    uint16 // the last attempt number used
}

// Update keeps what frame f of the claim's connection carries: a token or
// a ticket, and a fresh credential. It reports whether f carried one.
func (cl *Claim) Update(f Frame) bool {
	switch {
	case f.Type == wire.TypeAcquired && f.WithCredential:
		cl.Held, cl.ID, cl.Generation, cl.Credential = true, f.Token, f.Generation, f.Credential
	case f.Type == wire.TypeWaiting && f.WithTicket:
		cl.Held, cl.ID, cl.Generation, cl.Credential = false, f.Ticket, f.Generation, f.Credential
	default:
		return false
	}
	return true
}

// ResumeFrame is the resume of the claim with the next attempt number
// (which it takes), owner as given.
func (cl *Claim) ResumeFrame(t testing.TB, owner string) []byte {
	t.Helper()
	cl.Attempt++
	a := wire.Acquire{Version: wire.Version3, Flags: wire.FlagResume, LeaseMs: uint32(cl.Lease / time.Millisecond), Limit: cl.Limit,
		Name: cl.Name, Owner: owner, Resume: wire.Resume{ID: cl.ID, Generation: cl.Generation, Attempt: cl.Attempt, Credential: cl.Credential}}
	if cl.Held {
		a.Flags |= wire.FlagHeld
	}
	if cl.Shared {
		a.Flags |= wire.FlagShared
	}
	b, err := wire.AppendAcquire(nil, a)
	if err != nil {
		t.Fatalf("encode resume: %v", err)
	}
	return b
}

// Heartbeat sends a HEARTBEAT.
func (c *Conn) Heartbeat() {
	c.t.Helper()
	c.Write(wire.AppendHeartbeat(nil))
}

// Frame is one frame read from the server.
type Frame struct {
	Type     wire.Type
	Payload  []byte
	Position uint32      // WAITING
	Push     bool        // ACQUIRED
	Token    uint64      // ACQUIRED
	Err      *wire.Error // ERROR
	// Version 3: an ACQUIRED with CREDENTIAL, a WAITING with TICKET.
	WithCredential, WithTicket bool
	Ticket                     uint64 // WAITING with TICKET
	Generation                 uint32
	Credential                 wire.Credential
}

func (f Frame) String() string {
	switch f.Type {
	case wire.TypeWaiting:
		if f.WithTicket {
			return fmt.Sprintf("WAITING %d ticket=%d generation=%d", f.Position, f.Ticket, f.Generation)
		}
		return fmt.Sprintf("WAITING %d", f.Position)
	case wire.TypeAcquired:
		if f.WithCredential {
			return fmt.Sprintf("ACQUIRED push=%v token=%d generation=%d", f.Push, f.Token, f.Generation)
		}
		return fmt.Sprintf("ACQUIRED push=%v token=%d", f.Push, f.Token)
	case wire.TypeError:
		return fmt.Sprintf("ERROR %v %q", f.Err.Code, f.Err.Msg)
	}
	return fmt.Sprintf("%v % x", f.Type, f.Payload)
}

// ReadFrame reads one frame, failing the test after timeout.
func (c *Conn) ReadFrame(timeout time.Duration) Frame {
	c.t.Helper()
	f, err := c.TryReadFrame(timeout)
	if err != nil {
		c.t.Fatalf("read frame: %v", err)
	}
	return f
}

// TryReadFrame reads one frame or returns the error (io.EOF when the
// server closed the connection at a frame boundary).
func (c *Conn) TryReadFrame(timeout time.Duration) (Frame, error) {
	c.Conn.SetReadDeadline(time.Now().Add(timeout))
	var hdr [wire.HeaderSize]byte
	if _, err := io.ReadFull(c.Conn, hdr[:]); err != nil {
		return Frame{}, err
	}
	h, err := wire.ParseHeader(hdr[:])
	if err != nil {
		return Frame{}, err
	}
	f := Frame{Type: h.Type, Payload: make([]byte, h.Length)}
	if _, err := io.ReadFull(c.Conn, f.Payload); err != nil {
		return Frame{}, err
	}
	switch h.Type {
	case wire.TypeWaiting:
		var w wire.Waiting
		w, err = wire.DecodeWaitingV3(f.Payload)
		f.Position, f.WithTicket, f.Ticket, f.Generation, f.Credential = w.Position, w.WithTicket, w.Ticket, w.Generation, w.Credential
	case wire.TypeAcquired:
		var a wire.Acquired
		a, err = wire.DecodeAcquiredV3(f.Payload)
		f.Push, f.Token, f.WithCredential, f.Generation, f.Credential = a.Push, a.Token, a.WithCredential, a.Generation, a.Credential
	case wire.TypeError:
		f.Err, err = wire.DecodeError(f.Payload)
	default:
		err = fmt.Errorf("unexpected frame type %v", h.Type)
	}
	return f, err
}

// ExpectClosed asserts that the server closes the connection (EOF or reset)
// within timeout, with no further frame.
func (c *Conn) ExpectClosed(timeout time.Duration) {
	c.t.Helper()
	f, err := c.TryReadFrame(timeout)
	if err == nil {
		c.t.Fatalf("got frame %v, want the connection closed", f)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.t.Fatalf("connection still open after %v", timeout)
	}
}

// Eventually polls cond every few milliseconds until it holds, failing the
// test with msg after timeout. Use it only where no event can be awaited.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// NewConn wraps a connection the test dialled itself (for example with
// socket options set before the connect); t.Cleanup closes it.
func NewConn(t testing.TB, nc net.Conn) *Conn {
	t.Cleanup(func() { nc.Close() })
	return &Conn{t: t, Conn: nc}
}

// SuspendClock is a server's clock (server.Config.Now, cluster.Config.Now)
// for tests that suspend the machine, as far as the server can tell:
// package clock's reading, plus the suspends the test makes, which Go's
// monotonic clock and timers do not see (CLOCK_BOOTTIME against
// CLOCK_MONOTONIC across a real suspend on Linux).
type SuspendClock struct {
	// Stops makes it a clock that stops during a suspend, as the
	// monotonic clock does: a test's control, which must see the harm.
	Stops bool
	slept atomic.Int64 // the suspends so far
}

// Now is the clock's reading.
func (c *SuspendClock) Now() time.Time {
	if c.Stops {
		return clock.Now()
	}
	return clock.Now().Add(time.Duration(c.slept.Load()))
}

// Suspend makes the machine sleep for d: the clock moves d on at once.
func (c *SuspendClock) Suspend(d time.Duration) { c.slept.Add(int64(d)) }
