package server_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/testcerts"
	"github.com/batonlock/baton/internal/tokenstore"
	"github.com/batonlock/baton/server"
)

// TestTLSPipeliningBudget: sessions over TLS cannot park, so the readers
// of those that pipeline heartbeats share a budget of turns
// (docs/security.md: 2,000 turns of 16 frames a second, 32,000 frames in
// all), however long the server takes to answer a turn. Each answer is a
// TLS write of its own, so on a loaded machine a pipelined turn took more
// than the millisecond that used to tell a pipelining session, and 20
// sessions had over 500,000 frames a second answered, taking every CPU.
// Here each of the server's writes takes 50 µs more, as on that loaded
// machine, and 64 sessions pipeline for 2 s: the frames answered stay
// within the budget (with room for the turns each takes before it waits).
// Told by the turn's duration alone, about 150,000 a second were.
func TestTLSPipeliningBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of load; skipped in -short mode")
	}
	const sessions, window = 64, 2 * time.Second
	ca := testcerts.NewCA(t, "ca")
	addr, cfg := startSlowWriteTLS(t, ca, 50*time.Microsecond)
	var (
		answered atomic.Int64
		done     atomic.Bool
		wg       sync.WaitGroup
	)
	burst := make([]byte, 0, 3*1024)
	for range 1024 {
		burst = wire.AppendHeartbeat(burst)
	}
	var conns []*tls.Conn
	for i := range sessions {
		nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c := tls.Client(nc, cfg)
		t.Cleanup(func() { c.Close() })
		frame, _ := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 60000, Name: "pipe-" + strconv.Itoa(i)})
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(frame)
		var reply [12]byte
		if _, err := io.ReadFull(c, reply[:]); err != nil || wire.Type(reply[0]) != wire.TypeAcquired {
			t.Fatalf("session %d: % x %v", i, reply, err)
		}
		c.SetDeadline(time.Time{})
		conns = append(conns, c)
	}
	start := time.Now()
	for _, c := range conns {
		var inFlight atomic.Int64
		wg.Go(func() { // the answers, 12 bytes each
			buf := make([]byte, 64<<10)
			rest := 0
			for {
				m, err := c.Read(buf)
				if err != nil {
					return
				}
				rest += m
				if !done.Load() {
					answered.Add(int64(rest / 12))
				}
				inFlight.Add(-int64(rest / 12))
				rest %= 12
			}
		})
		wg.Go(func() { // without pause: a burst whenever few are in flight
			for !done.Load() {
				if inFlight.Load() > 4096 {
					time.Sleep(time.Millisecond)
					continue
				}
				inFlight.Add(1024)
				if _, err := c.Write(burst); err != nil {
					return
				}
			}
		})
	}
	time.Sleep(window)
	done.Store(true)
	took := time.Since(start)
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	rate := float64(answered.Load()) / took.Seconds()
	t.Logf("%d TLS sessions pipelining: %d heartbeats answered in %v, %.0f a second", sessions, answered.Load(), took.Round(time.Millisecond), rate)
	// 32,000 a second in all, and each session's first turns before it
	// waits: half as much again is the bound.
	if limit := 48000.0; rate > limit {
		t.Errorf("%.0f pipelined heartbeats a second answered over TLS, want at most %.0f (the shared budget of turns)", rate, limit)
	}
	if answered.Load() == 0 {
		t.Error("no pipelined heartbeat answered: a flood is read less often, never ended")
	}
}

// startSlowWriteTLS starts a TLS server each of whose writes to a
// connection waits delay first, and returns its address and a client
// configuration for it.
func startSlowWriteTLS(t *testing.T, ca *testcerts.CA, delay time.Duration) (string, *tls.Config) {
	t.Helper()
	dir := t.TempDir()
	sf := ca.Server(t).Write(t, dir, "server")
	rl, err := server.NewTLSReloader(server.TLSFiles{CertFile: sf.Cert, KeyFile: sf.Key})
	if err != nil {
		t.Fatal(err)
	}
	store, err := tokenstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.MaxConnsPerIP, cfg.MaxConnsPerIdentity = 0, 0
	cfg.NextToken = store.Next
	cfg.TLS = rl.Config()
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(slowWriteListener{ln, delay}) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-served
	})
	return ln.Addr().String(), &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
}

type slowWriteListener struct {
	net.Listener
	delay time.Duration
}

func (l slowWriteListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return slowWriteConn{c, l.delay}, nil
}

type slowWriteConn struct {
	net.Conn
	delay time.Duration
}

func (c slowWriteConn) Write(p []byte) (int, error) {
	time.Sleep(c.delay)
	return c.Conn.Write(p)
}
