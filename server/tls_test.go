package server_test

import (
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/testcerts"
	"github.com/batonlock/baton/server"
)

// tlsServer is a server speaking TLS from certificate files that the test
// can rewrite and reload.
type tlsServer struct {
	ts     *batontest.Server
	ca     *testcerts.CA // signs the server certificate and trusted clients
	dir    string
	files  server.TLSFiles
	reload *server.TLSReloader
}

// startTLS starts a TLS server whose certificate ca signs; clientCAs, if
// any, make up its client CA bundle (mutual TLS).
func startTLS(t testing.TB, ca *testcerts.CA, clientCAs []*testcerts.CA, mutate ...func(*server.Config)) *tlsServer {
	t.Helper()
	dir := t.TempDir()
	sf := ca.Server(t).Write(t, dir, "server")
	files := server.TLSFiles{CertFile: sf.Cert, KeyFile: sf.Key}
	if len(clientCAs) > 0 {
		files.ClientCAFile = filepath.Join(dir, "client-ca.pem")
		testcerts.WriteFile(t, files.ClientCAFile, testcerts.Bundle(clientCAs...))
	}
	rl, err := server.NewTLSReloader(files)
	if err != nil {
		t.Fatalf("NewTLSReloader: %v", err)
	}
	mutate = append([]func(*server.Config){func(c *server.Config) { c.TLS = rl.Config() }}, mutate...)
	return &tlsServer{ts: batontest.StartServer(t, mutate...), ca: ca, dir: dir, files: files, reload: rl}
}

// clientConfig trusts the server's CA and presents leaf, if not nil.
func (s *tlsServer) clientConfig(leaf *testcerts.Leaf) *tls.Config {
	cfg := &tls.Config{RootCAs: s.ca.Pool(), ServerName: "127.0.0.1"}
	if leaf != nil {
		// Presented whatever the server asks for: Go's client would send
		// no certificate rather than one of a CA the server does not name.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &leaf.TLS, nil }
	}
	return cfg
}

// dialTLS connects with cfg and completes the client's side of the
// handshake; the error is the handshake's.
func dialTLS(t testing.TB, addr string, cfg *tls.Config) (*batontest.Conn, error) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	tc := tls.Client(nc, cfg)
	c := batontest.NewConn(t, tc)
	tc.SetDeadline(time.Now().Add(frameWait))
	err = tc.Handshake()
	tc.SetDeadline(time.Time{})
	return c, err
}

// expectRefused asserts that a client with cfg never gets a frame: its
// handshake fails, or (TLS 1.3, where the server checks the client's
// certificate after the client is done) the first read fails.
func expectRefused(t *testing.T, addr string, cfg *tls.Config, name string) {
	t.Helper()
	c, err := dialTLS(t, addr, cfg)
	if err != nil {
		return
	}
	c.Conn.SetWriteDeadline(time.Now().Add(frameWait))
	c.Conn.Write(acquireFrame(1, 0, 10000, name, ""))
	f, err := c.TryReadFrame(frameWait)
	if err == nil {
		t.Fatalf("got %v, want the handshake refused", f)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v, want it refused", frameWait)
	}
}

func endedTLS(ts *batontest.Server) float64 {
	return counterValue(ts, "baton_sessions_ended_total", "reason", "tls_handshake")
}

// counterValue reads one series of a counter vector.
func counterValue(ts *batontest.Server, name, label, value string) float64 {
	mfs, err := ts.Srv.Registry().Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

// TestTLSPlainClient: a client that speaks the plain protocol to a TLS
// listener is told ERROR UNAUTHORIZED (in plain bytes, the only ones it
// reads) and closed; it never reaches the table.
func TestTLSPlainClient(t *testing.T) {
	t.Parallel()
	s := startTLS(t, testcerts.NewCA(t, "ca"), nil)
	c := batontest.Dial(t, s.ts.Addr)
	c.Acquire("plain", 10*time.Second, false, "")
	e := expectError(t, c, wire.CodeUnauthorized)
	if e.Msg != "this server requires TLS" {
		t.Errorf("message %q, want %q", e.Msg, "this server requires TLS")
	}
	if _, ok := s.ts.Srv.Lock("plain"); ok {
		t.Error("the plain client's lock is in the table")
	}
	batontest.Eventually(t, frameWait, func() bool { return endedTLS(s.ts) == 1 },
		"sessions ended with reason tls_handshake: %v, want 1", endedTLS(s.ts))

	// A TLS client of the same server is served.
	tc, err := dialTLS(t, s.ts.Addr, s.clientConfig(nil))
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	tc.Acquire("plain", 10*time.Second, false, "")
	expectAcquired(t, tc)
}

// TestTLSMutual: with a client CA bundle, only a client whose certificate
// a CA of the bundle signed, and which is valid now, gets past the
// handshake; and the client refuses a server its roots do not trust.
func TestTLSMutual(t *testing.T) {
	t.Parallel()
	ca, other := testcerts.NewCA(t, "ca"), testcerts.NewCA(t, "other")
	s := startTLS(t, ca, []*testcerts.CA{ca})
	good := ca.Client(t, "worker")
	expired := ca.Issue(t, testcerts.Spec{CN: "old", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	notYet := ca.Issue(t, testcerts.Spec{CN: "early", NotBefore: time.Now().Add(time.Hour)})
	foreign := other.Client(t, "worker")

	c, err := dialTLS(t, s.ts.Addr, s.clientConfig(good))
	if err != nil {
		t.Fatalf("handshake with a good certificate: %v", err)
	}
	c.Acquire("mtls", 10*time.Second, false, "")
	expectAcquired(t, c)

	refused := 0
	for _, tt := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"no certificate", s.clientConfig(nil)},
		{"certificate of another CA", s.clientConfig(foreign)},
		{"expired certificate", s.clientConfig(expired)},
		{"certificate not yet valid", s.clientConfig(notYet)},
		{"TLS 1.2 without certificate", func() *tls.Config {
			cfg := s.clientConfig(nil)
			cfg.MaxVersion = tls.VersionTLS12
			return cfg
		}()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			expectRefused(t, s.ts.Addr, tt.cfg, "mtls-refused")
		})
		refused++
	}
	// The client's own check: a server its roots do not trust.
	distrust := s.clientConfig(good)
	distrust.RootCAs = other.Pool()
	if _, err := dialTLS(t, s.ts.Addr, distrust); err == nil {
		t.Error("handshake with a server signed by an untrusted CA succeeded")
	}
	refused++

	if _, ok := s.ts.Srv.Lock("mtls-refused"); ok {
		t.Error("a refused client's lock is in the table")
	}
	batontest.Eventually(t, frameWait, func() bool { return endedTLS(s.ts) == float64(refused) },
		"sessions ended with reason tls_handshake: %v, want %d", endedTLS(s.ts), refused)
	expectHolds(t, c, expectTokenOf(t, s.ts, "mtls"))
}

// expectTokenOf is the token of the holder of lock name.
func expectTokenOf(t *testing.T, ts *batontest.Server, name string) uint64 {
	t.Helper()
	lv, ok := ts.Srv.Lock(name)
	if !ok || lv.Holder == nil {
		t.Fatalf("lock %q has no holder", name)
	}
	return lv.Holder.Token
}

// TestTLSReload: a CA removed from the client bundle and reloaded refuses
// new handshakes of the clients it signed while their sessions carry on;
// a new server certificate is served to new connections.
func TestTLSReload(t *testing.T) {
	t.Parallel()
	ca, ca2 := testcerts.NewCA(t, "ca"), testcerts.NewCA(t, "ca2")
	s := startTLS(t, ca, []*testcerts.CA{ca, ca2})
	revoked, kept := ca2.Client(t, "team-b"), ca.Client(t, "team-a")

	old, err := dialTLS(t, s.ts.Addr, s.clientConfig(revoked))
	if err != nil {
		t.Fatalf("handshake before the reload: %v", err)
	}
	old.Acquire("reload", 10*time.Second, false, "")
	token := expectAcquired(t, old)

	testcerts.WriteFile(t, s.files.ClientCAFile, testcerts.Bundle(ca))
	newServer := ca.Server(t)
	testcerts.WriteFile(t, s.files.CertFile, newServer.CertPEM)
	testcerts.WriteFile(t, s.files.KeyFile, newServer.KeyPEM)
	if err := s.reload.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}

	expectRefused(t, s.ts.Addr, s.clientConfig(revoked), "reload-new")
	expectHolds(t, old, token) // the established session is untouched
	c, err := dialTLS(t, s.ts.Addr, s.clientConfig(kept))
	if err != nil {
		t.Fatalf("handshake of a client of the kept CA: %v", err)
	}
	tc := c.Conn.(*tls.Conn)
	if got := tc.ConnectionState().PeerCertificates[0]; !got.Equal(newServer.TLS.Leaf) {
		t.Errorf("server certificate serial %v after reload, want the new one %v", got.SerialNumber, newServer.TLS.Leaf.SerialNumber)
	}
	c.Acquire("reload", 10*time.Second, false, "")
	expectWaiting(t, c, 1)

	// A reload that fails keeps what is in use.
	testcerts.WriteFile(t, s.files.ClientCAFile, []byte("not a certificate\n"))
	if err := s.reload.Reload(); err == nil {
		t.Fatal("Reload of a bundle without certificates succeeded")
	}
	c2, err := dialTLS(t, s.ts.Addr, s.clientConfig(kept))
	if err != nil {
		t.Fatalf("handshake after a failed reload: %v", err)
	}
	c2.Acquire("reload", 10*time.Second, false, "")
	expectWaiting(t, c2, 2)
	expectRefused(t, s.ts.Addr, s.clientConfig(revoked), "reload-new")
}

// TestTLSHandshakeTimeout: a handshake that does not complete within
// io-timeout is cut, wherever it stalls.
func TestTLSHandshakeTimeout(t *testing.T) {
	t.Parallel()
	const io = 200 * time.Millisecond
	ca := testcerts.NewCA(t, "ca")
	s := startTLS(t, ca, []*testcerts.CA{ca}, ioTimeout(io))
	for _, tt := range []struct {
		name string
		send []byte
	}{
		{"nothing", nil},
		{"half a record header", []byte{0x16, 0x03}},
		{"a record header", []byte{0x16, 0x03, 0x01, 0x00, 0x80}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			c := batontest.Dial(t, s.ts.Addr)
			if tt.send != nil {
				c.Write(tt.send)
			}
			c.ExpectClosed(io + 2*time.Second)
			if d := time.Since(start); d < io {
				t.Fatalf("closed after %v, before io-timeout %v", d, io)
			}
		})
	}
	// A client that stalls after its ClientHello is cut too.
	t.Run("after the ClientHello", func(t *testing.T) {
		t.Parallel()
		// Before the dial: the server may accept, and start its clock,
		// before Dial returns here.
		start := time.Now()
		nc := batontest.Dial(t, s.ts.Addr).Conn
		stall := &stallAfterFirstWrite{Conn: nc}
		tc := tls.Client(stall, s.clientConfig(ca.Client(t, "slow")))
		tc.SetDeadline(time.Now().Add(io + 2*time.Second))
		err := tc.Handshake()
		if err == nil {
			// TLS 1.3: the client is done once it has sent its second
			// flight (swallowed here); the server is not.
			_, err = tc.Read(make([]byte, 1))
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("still open after %v: %v", time.Since(start), err)
		}
		if d := time.Since(start); d < io {
			t.Fatalf("cut after %v, before io-timeout %v", d, io)
		}
	})
}

// stallAfterFirstWrite passes the client's first flight and swallows the
// rest, like a peer that stops in mid-handshake.
type stallAfterFirstWrite struct {
	net.Conn
	wrote bool
}

func (c *stallAfterFirstWrite) Write(b []byte) (int, error) {
	if c.wrote {
		return len(b), nil
	}
	c.wrote = true
	return c.Conn.Write(b)
}

// TestTLSHostileHandshake: an unauthenticated peer that announces more
// than TLS allows is cut at once, before the server reads or buffers it.
func TestTLSHostileHandshake(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ca")
	s := startTLS(t, ca, []*testcerts.CA{ca}) // io-timeout 5s: a cut must not wait for it
	for _, tt := range []struct {
		name string
		send []byte
	}{
		// A record of 64 KiB: TLS records carry at most 16 KiB and some.
		{"oversize record", []byte{0x16, 0x03, 0x01, 0xff, 0xff}},
		// A ClientHello that claims 16 MiB: far past the handshake message limit.
		{"oversize handshake message", []byte{0x16, 0x03, 0x01, 0x00, 0x04, 0x01, 0xff, 0xff, 0xff}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := batontest.Dial(t, s.ts.Addr)
			c.Write(tt.send)
			c.ExpectClosed(time.Second)
		})
	}
}

// TestMaxConnsPerIP: past the cap, connections from the same address are
// told ERROR OVERLOADED, which names the cap, and closed at once; a
// closed one frees its place.
func TestMaxConnsPerIP(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, func(c *server.Config) { c.MaxConnsPerIP = 2 })
	a, _ := hold(t, ts, "ip-a", 10*time.Second)
	hold(t, ts, "ip-b", 10*time.Second)
	over := batontest.Dial(t, ts.Addr)
	over.Acquire("ip-over", 10*time.Second, false, "")
	f, err := over.TryReadFrame(frameWait)
	if err != nil || f.Type != wire.TypeError {
		t.Fatalf("past the cap: got %v, %v; want ERROR OVERLOADED", f, err)
	}
	if e, _ := wire.DecodeError(f.Payload); e.Code != wire.CodeOverloaded || !strings.Contains(e.Msg, "max-conns-per-ip") {
		t.Errorf("past the cap: got %v, want OVERLOADED naming max-conns-per-ip", e)
	}
	over.ExpectClosed(frameWait)
	if got := counterValue(ts, "baton_limit_refusals_total", "limit", "connections_per_ip"); got != 1 {
		t.Errorf("refusals for connections_per_ip: %v, want 1", got)
	}
	a.Conn.Close()
	// The place is given back when the server has closed a's socket too.
	batontest.Eventually(t, frameWait, func() bool {
		c, err := net.DialTimeout("tcp", ts.Addr, time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		fc := batontest.NewConn(t, c)
		fc.Acquire("ip-c", 10*time.Second, false, "")
		f, err := fc.TryReadFrame(frameWait)
		return err == nil && f.Type == wire.TypeAcquired
	}, "no connection accepted after one of the two closed")
}

func TestMaxConnsPerIPValidate(t *testing.T) {
	t.Parallel()
	cfg := server.DefaultConfig()
	cfg.NextToken = func() uint64 { return 1 }
	cfg.MaxConnsPerIP = -1
	if _, err := server.New(cfg); err == nil || err.Error() != "max-conns-per-ip (-1) must not be negative" {
		t.Fatalf("New with MaxConnsPerIP -1: %v", err)
	}
}

// TestTLSShutdownCutsHandshake: Shutdown does not wait for a handshake
// that stalls (io-timeout is long here).
func TestTLSShutdownCutsHandshake(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ca")
	s := startTLS(t, ca, nil, ioTimeout(time.Minute))
	c := batontest.Dial(t, s.ts.Addr)
	c.Write([]byte{0x16, 0x03}) // half a record header, then silence
	batontest.Eventually(t, frameWait, func() bool { return gaugeValue(s.ts, "baton_connections") == 1 },
		"the server did not accept the connection")
	start := time.Now()
	s.ts.Stop(t)
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Shutdown took %v with a stalled handshake, want it cut at once", d)
	}
	c.ExpectClosed(frameWait)
}

func gaugeValue(ts *batontest.Server, name string) float64 {
	mfs, err := ts.Srv.Registry().Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// TestMaxConnsPerIdentity: under mutual TLS, past the cap, a session of
// the same certificate identities gets ERROR OVERLOADED after its
// handshake, whatever its address; another identity is not counted with
// it; a closed session frees its place.
func TestMaxConnsPerIdentity(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ca")
	s := startTLS(t, ca, []*testcerts.CA{ca}, func(c *server.Config) { c.MaxConnsPerIdentity = 2 })
	shared, other := ca.Client(t, "shared"), ca.Client(t, "other")
	claim := func(leaf *testcerts.Leaf, name string) (*batontest.Conn, batontest.Frame) {
		c, err := dialTLS(t, s.ts.Addr, s.clientConfig(leaf))
		if err != nil {
			t.Fatal(err)
		}
		c.Acquire(name, 10*time.Second, false, "")
		return c, c.ReadFrame(frameWait)
	}
	a, f := claim(shared, "id-a")
	if f.Type != wire.TypeAcquired {
		t.Fatalf("first session: %v", f)
	}
	if _, f := claim(shared, "id-b"); f.Type != wire.TypeAcquired {
		t.Fatalf("second session: %v", f)
	}
	_, f = claim(shared, "id-c")
	if f.Type != wire.TypeError || f.Err.Code != wire.CodeOverloaded ||
		!strings.Contains(f.Err.Msg, `client identity "shared" has 2 connections open`) {
		t.Fatalf("third session of one identity: %v, want ERROR OVERLOADED naming it", f)
	}
	if _, f := claim(other, "id-d"); f.Type != wire.TypeAcquired {
		t.Fatalf("another identity's session: %v", f)
	}
	if got := counterValue(s.ts, "baton_limit_refusals_total", "limit", "connections_per_identity"); got != 1 {
		t.Errorf("refusals for connections_per_identity: %v, want 1", got)
	}
	a.Conn.Close()
	batontest.Eventually(t, frameWait, func() bool {
		c, f := claim(shared, "id-e")
		defer c.Conn.Close()
		return f.Type == wire.TypeAcquired
	}, "no session of the identity accepted after one of its two closed")
}

// TestMaxConnsPerIdentityNoIdentity: a verified certificate that names no
// identity (no CN, no SAN) is counted too: all such certificates are one
// client, which the cap bounds like any other.
func TestMaxConnsPerIdentityNoIdentity(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ca")
	s := startTLS(t, ca, []*testcerts.CA{ca}, func(c *server.Config) { c.MaxConnsPerIdentity = 2 })
	nameless := ca.Issue(t, testcerts.Spec{})
	for i := range 3 {
		c, err := dialTLS(t, s.ts.Addr, s.clientConfig(nameless))
		if err != nil {
			t.Fatal(err)
		}
		c.Acquire("nameless-"+strconv.Itoa(i), 10*time.Second, false, "")
		f := c.ReadFrame(frameWait)
		if i < 2 && f.Type != wire.TypeAcquired {
			t.Fatalf("session %d of a certificate without identities: %v, want ACQUIRED", i, f)
		}
		if i == 2 && (f.Type != wire.TypeError || f.Err.Code != wire.CodeOverloaded || !strings.Contains(f.Err.Msg, "names no identity")) {
			t.Fatalf("third session of certificates without identities: %v, want ERROR OVERLOADED", f)
		}
	}
}
