package baton

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

func TestInputsRefusedBeforeDialling(t *testing.T) {
	for _, tc := range []struct {
		name string
		lock string
		opts []Option
		want string
	}{
		{"zero lease", "jobs/nightly", []Option{WithLease(0)}, `acquire "jobs/nightly": lease 0s must be at least 1ms`},
		{"sub-ms lease", "jobs/nightly", []Option{WithLease(500 * time.Microsecond)}, `acquire "jobs/nightly": lease 500µs must be at least 1ms`},
		{"negative lease", "jobs", []Option{WithLease(-time.Second)}, `acquire "jobs": lease -1s must be at least 1ms`},
		{"huge lease", "jobs", []Option{WithLease(50 * 24 * time.Hour)}, `acquire "jobs": lease 1200h0m0s exceeds the protocol's maximum of 1193h2m47.295s`},
		{"empty name", "", nil, `acquire "": lock name is empty`},
		{"long name", strings.Repeat("n", 256), nil, `acquire "` + strings.Repeat("n", 256) + `": lock name of 256 bytes exceeds 255`},
		{"control byte", "a\nb", nil, `acquire "a\nb": lock name "a\nb": control byte 0x0a at offset 1`},
		{"bad UTF-8", "a\xffb", nil, `acquire "a\xffb": lock name "a\xffb": not valid UTF-8`},
		{"long owner", "jobs", []Option{WithOwner(strings.Repeat("o", 256))}, `acquire "jobs": owner text of 256 bytes exceeds 255`},
		{"negative dial timeout", "jobs", []Option{WithDialTimeout(-1)}, `acquire "jobs": dial timeout -1ns must not be negative`},
		{"last one wins", "jobs", []Option{WithLease(time.Second), WithLease(0)}, `acquire "jobs": lease 0s must be at least 1ms`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"pipe:1"})
			_, err := c.Acquire(context.Background(), tc.lock, tc.opts...)
			if err == nil || err.Error() != tc.want {
				t.Errorf("Acquire: %q, want %q", err, tc.want)
			}
			var we *wire.Error
			if !errors.Is(err, ErrBadRequest) || !errors.As(err, &we) || we.Code != wire.CodeBadRequest {
				t.Errorf("Acquire: %v, want ErrBadRequest and a *wire.Error BAD_REQUEST", err)
			}
			err = c.Do(context.Background(), tc.lock, func(context.Context, *Lock) error {
				t.Errorf("work ran")
				return nil
			}, tc.opts...)
			if err == nil || err.Error() != tc.want {
				t.Errorf("Do: %q, want %q", err, tc.want)
			}
			if n := pn.dialCount(); n != 0 {
				t.Errorf("%d dials, want none", n)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		addrs []string
		opts  []Option
		want  string
	}{
		{nil, nil, "baton.New: no server address"},
		{[]string{"localhost"}, nil, "baton.New: address localhost: missing port in address"},
		{[]string{"localhost:7000"}, []Option{WithLease(0)}, "baton.New: lease 0s must be at least 1ms"},
		{[]string{"localhost:7000"}, []Option{WithOwner("a\x7fb")}, `baton.New: owner "a\x7fb": control byte 0x7f at offset 1`},
	} {
		c, err := New(tc.addrs, tc.opts...)
		if c != nil || err == nil || err.Error() != tc.want {
			t.Errorf("New(%q): %v, %q; want nil, %q", tc.addrs, c, err, tc.want)
		}
		if !errors.Is(err, ErrBadRequest) {
			t.Errorf("New(%q): %v, want ErrBadRequest", tc.addrs, err)
		}
	}
}

func TestDefaultOwner(t *testing.T) {
	host, _ := os.Hostname()
	if got, want := defaultOwner(), host+":"+strconv.Itoa(os.Getpid()); got != want {
		t.Errorf("default owner %q, want %q", got, want)
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestVectors runs docs/protocol.md's test vectors through the client: the bytes
// it sends, and its reading of the bytes it receives.
func TestVectors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lock   string
		opts   []Option
		vector string
	}{
		{"ACQUIRE v1, no flags, lease 2000 ms, name jobs, no owner", "jobs",
			[]Option{WithLease(2 * time.Second), WithOwner("")}, "01 00 0b 01 00 00 00 07 d0 04 6a 6f 62 73"},
		{"ACQUIRE v1, NOWAIT, lease 1 ms, name a, owner h:1", "a",
			[]Option{WithNoWait(true), WithLease(time.Millisecond), WithOwner("h:1")}, "01 00 0b 01 01 00 00 00 01 01 61 68 3a 31"},
		{"lease in whole milliseconds, the last option winning", "a",
			[]Option{WithLease(time.Hour), WithNoWait(true), WithLease(1500 * time.Microsecond), WithOwner("x"), WithOwner("h:1")},
			"01 00 0b 01 01 00 00 00 01 01 61 68 3a 31"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, pn := newPipeClient(t, []string{"pipe:1"})
				ch := goAcquire(context.Background(), c, tc.lock, tc.opts...)
				p := pn.accept(t)
				f := p.next(t, wire.TypeAcquire)
				got := wire.AppendFrame(nil, f.typ, f.payload)
				if want := mustHex(t, tc.vector); !bytes.Equal(got, want) {
					t.Errorf("ACQUIRE % x, want % x", got, want)
				}
				p.send(t, mustHex(t, "82 00 09 00 00 00 00 00 00 00 00 01")) // ACQUIRED reply, token 1
				r := result(t, ch)
				if r.err != nil || r.l.Token() != 1 {
					t.Fatalf("Acquire: %v, want token 1", r.err)
				}
				hb := p.next(t, wire.TypeHeartbeat)
				if got := wire.AppendFrame(nil, hb.typ, hb.payload); !bytes.Equal(got, mustHex(t, "02 00 00")) {
					t.Errorf("HEARTBEAT % x, want 02 00 00", got)
				}
				p.send(t, mustHex(t, "80 00 04 01 62 79 65")) // ERROR SHUTDOWN bye
				<-r.l.Done()
				if err := r.l.Err(); !errors.Is(err, ErrShutdown) || err.Error() != `lock "`+tc.lock+`" lost: server sent SHUTDOWN: bye` {
					t.Errorf("Err() = %v, want SHUTDOWN: bye", err)
				}
			})
		})
	}
	t.Run("WAITING position 3, ACQUIRED push token 0x0100000000000002", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"pipe:1"})
			ch := goAcquire(context.Background(), c, "jobs")
			p := pn.accept(t)
			p.next(t, wire.TypeAcquire)
			p.send(t, mustHex(t, "81 00 05 00 00 00 00 03"))
			p.send(t, mustHex(t, "82 00 09 01 01 00 00 00 00 00 00 02"))
			r := result(t, ch)
			if r.err != nil || r.l.Token() != 0x0100000000000002 {
				t.Fatalf("Acquire: %v, token %#x; want token 0x0100000000000002", r.err, r.l.Token())
			}
			r.l.Release()
		})
	})
}

func TestDo(t *testing.T) {
	errWork := errors.New("work failed")
	t.Run("returns the work's error and releases", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"pipe:1"})
			done := make(chan error, 1)
			go func() {
				done <- c.Do(context.Background(), "jobs", func(ctx context.Context, l *Lock) error {
					if l.Token() != 7 || ctx != l.Context() {
						t.Errorf("work got token %d, want 7, and the lock's context", l.Token())
					}
					time.Sleep(11 * time.Second) // four heartbeats at lease/4 = 2.5s
					return errWork
				})
			}()
			p := pn.accept(t)
			p.next(t, wire.TypeAcquire)
			p.acquired(t, 7)
			for range 4 {
				p.next(t, wire.TypeHeartbeat)
				p.acquired(t, 7)
			}
			if err := <-done; err != errWork {
				t.Errorf("Do: %v, want the work's error", err)
			}
			if at, _ := p.closed(t); !at.Equal(time.Now()) {
				t.Errorf("connection closed %v after Do returned, want at once", time.Since(at))
			}
		})
	})
	for _, tc := range []struct {
		name    string
		ret     func(ctx context.Context) error // what the work returns after its context ends
		is      []error
		isNot   []error
		msgTail string
	}{
		{"loss with nil from the work", func(context.Context) error { return nil },
			[]error{ErrLockLost, ErrForceReleased}, []error{context.Canceled}, ""},
		{"loss with the cause from the work", func(ctx context.Context) error { return context.Cause(ctx) },
			[]error{ErrLockLost, ErrForceReleased}, []error{context.Canceled}, ""},
		// A caller that takes context.Canceled for its own shutdown must
		// not mistake the loss for it.
		{"loss with ctx.Err() from the work", func(ctx context.Context) error { return ctx.Err() },
			[]error{ErrLockLost, ErrForceReleased}, []error{context.Canceled}, " (the work returned: context canceled)"},
		{"loss with ctx.Err() wrapped by the work", func(ctx context.Context) error { return fmt.Errorf("step 3: %w", ctx.Err()) },
			[]error{ErrLockLost, ErrForceReleased}, []error{context.Canceled}, " (the work returned: step 3: context canceled)"},
		{"loss with another error from the work", func(context.Context) error { return errWork },
			[]error{ErrLockLost, ErrForceReleased, errWork}, nil, " (and the work returned: work failed)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, pn := newPipeClient(t, []string{"pipe:1"})
				done := make(chan error, 1)
				var cancelledAt time.Time
				go func() {
					done <- c.Do(context.Background(), "jobs", func(ctx context.Context, l *Lock) error {
						<-ctx.Done()
						cancelledAt = time.Now()
						return tc.ret(ctx)
					})
				}()
				p := pn.accept(t)
				p.next(t, wire.TypeAcquire)
				p.acquired(t, 7)
				time.Sleep(time.Second)
				p.fail(t, wire.CodeForceReleased, "by admin")
				lostAt := time.Now()
				err := <-done
				if !cancelledAt.Equal(lostAt) {
					t.Errorf("work cancelled %v after the loss, want at once", cancelledAt.Sub(lostAt))
				}
				for _, want := range tc.is {
					if !errors.Is(err, want) {
						t.Errorf("Do: %v, want errors.Is %v", err, want)
					}
				}
				for _, notWant := range tc.isNot {
					if errors.Is(err, notWant) {
						t.Errorf("Do: %v, want not errors.Is %v", err, notWant)
					}
				}
				if want := `lock "jobs" lost: server sent FORCE_RELEASED: by admin` + tc.msgTail; err == nil || err.Error() != want {
					t.Errorf("Do: %q, want %q", err, want)
				}
			})
		})
	}
	t.Run("caller's context ends the work", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"pipe:1"})
			ctx, cancel := context.WithCancelCause(context.Background())
			errStop := errors.New("stop")
			done := make(chan error, 1)
			go func() {
				done <- c.Do(ctx, "jobs", func(ctx context.Context, l *Lock) error {
					<-ctx.Done()
					return context.Cause(ctx)
				})
			}()
			p := pn.accept(t)
			p.next(t, wire.TypeAcquire)
			p.acquired(t, 7)
			time.Sleep(time.Second)
			cancel(errStop)
			if err := <-done; err != errStop {
				t.Errorf("Do: %v, want the caller's cause", err)
			}
			p.closed(t)
		})
	})
	t.Run("panic in the work releases", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"pipe:1"})
			done := make(chan any, 1)
			go func() {
				defer func() { done <- recover() }()
				c.Do(context.Background(), "jobs", func(context.Context, *Lock) error { panic("boom") })
			}()
			p := pn.accept(t)
			p.next(t, wire.TypeAcquire)
			p.acquired(t, 7)
			if v := <-done; v != "boom" {
				t.Errorf("recovered %v, want boom", v)
			}
			p.closed(t)
		})
	})
	t.Run("try-lock of a held lock", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"pipe:1"})
			done := make(chan error, 1)
			go func() {
				done <- c.Do(context.Background(), "jobs", func(context.Context, *Lock) error {
					t.Errorf("work ran without the lock")
					return nil
				}, WithNoWait(true))
			}()
			p := pn.accept(t)
			f := p.next(t, wire.TypeAcquire)
			if f.payload[1] != wire.FlagNoWait {
				t.Errorf("ACQUIRE flags %#x, want NOWAIT", f.payload[1])
			}
			p.fail(t, wire.CodeBusy, "held by h:1")
			if err := <-done; !errors.Is(err, ErrBusy) || err.Error() != `acquire "jobs": BUSY: held by h:1` {
				t.Errorf("Do: %v, want ErrBusy", err)
			}
		})
	})
	t.Run("nil work", func(t *testing.T) {
		c, _ := newPipeClient(t, []string{"pipe:1"})
		if err := c.Do(context.Background(), "jobs", nil); err == nil {
			t.Errorf("Do with nil work: nil error")
		}
	})
}

// TestAddressesOverPipe: failover order, and no retry when nothing answers.
func TestAddressesOverPipe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"a:1", "b:1", "c:1"})
		pn.setDown("a:1", true)
		ch := goAcquire(context.Background(), c, "jobs")
		p := pn.accept(t)
		if p.addr != "b:1" {
			t.Fatalf("connected to %s, want b:1 (a:1 is down)", p.addr)
		}
		p.next(t, wire.TypeAcquire)
		p.waiting(t, 1)
		// SHUTDOWN: at once to the next address.
		p.fail(t, wire.CodeShutdown, "bye")
		p = pn.accept(t)
		if p.addr != "c:1" {
			t.Fatalf("after SHUTDOWN of b:1 connected to %s, want c:1", p.addr)
		}
		p.next(t, wire.TypeAcquire)
		p.acquired(t, 3)
		r := result(t, ch)
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.l.Release()
		if got := c.last.Load(); got != 2 {
			t.Errorf("preferred address %d, want 2 (c:1)", got)
		}

		// Nothing reachable on the first round: fail at once.
		for _, a := range []string{"a:1", "b:1", "c:1"} {
			pn.setDown(a, true)
		}
		start := time.Now()
		_, err := c.Acquire(context.Background(), "jobs")
		if err == nil || time.Since(start) != 0 || strings.Count(err.Error(), "connection refused") != 3 {
			t.Errorf("Acquire with every address down: %v after %v, want three refusals at once", err, time.Since(start))
		}
	})
}

// TestRestartWhileWaitingOverPipe: after SHUTDOWN a waiter redials at once,
// then backs off while the server is away, and takes a new place.
func TestRestartWhileWaitingOverPipe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"a:1"})
		ch := goAcquire(context.Background(), c, "jobs")
		p := pn.accept(t)
		p.next(t, wire.TypeAcquire)
		p.waiting(t, 4)
		pn.setDown("a:1", true)
		p.fail(t, wire.CodeShutdown, "restart")
		time.Sleep(time.Second)
		if n := pn.dialCount(); n < 4 || n > 8 {
			t.Errorf("%d dials in the first second of the outage, want a few (backoff from %v)", n, backoffBase)
		}
		pn.setDown("a:1", false)
		p = pn.accept(t)
		p.next(t, wire.TypeAcquire)
		p.acquired(t, 5)
		r := result(t, ch)
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.l.Release()
	})
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{
		1: 50 * time.Millisecond, 2: 100 * time.Millisecond, 3: 200 * time.Millisecond,
		6: 1600 * time.Millisecond, 7: backoffCap, 100: backoffCap,
	} {
		for range 100 {
			if d := backoff(n); d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %v, want %v .. %v", n, d, want/2, want)
			}
		}
	}
}

// TestTLS: WithTLSConfig is used for the connection, with ServerName from
// the address; a certificate the client does not trust fails at once.
func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer conn.Close()
		var h [wire.HeaderSize]byte
		if _, err := io.ReadFull(conn, h[:]); err != nil {
			served <- err
			return
		}
		hdr, _ := wire.ParseHeader(h[:])
		io.ReadFull(conn, make([]byte, hdr.Length))
		conn.Write(wire.AppendAcquired(nil, false, 11))
		io.Copy(io.Discard, conn)
		served <- nil
	}()
	c := newTestClient(t, []string{ln.Addr().String()}, WithTLSConfig(&tls.Config{RootCAs: pool}))
	l := acquire(t, c, "secure")
	if l.Token() != 11 {
		t.Errorf("token %d, want 11", l.Token())
	}
	if _, ok := l.s.conn.(*tls.Conn); !ok {
		t.Errorf("session over %T, want *tls.Conn", l.s.conn)
	}
	l.Release()
	if err := <-served; err != nil {
		t.Errorf("TLS peer: %v", err)
	}

	// An untrusted certificate: a client error, at once.
	c = newTestClient(t, []string{ln.Addr().String()}, WithTLSConfig(&tls.Config{}))
	go func() {
		if conn, err := ln.Accept(); err == nil {
			conn.(*tls.Conn).Handshake()
			conn.Close()
		}
	}()
	if _, err := c.Acquire(context.Background(), "secure"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Acquire with an untrusted certificate: %v, want a certificate error", err)
	}
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "baton test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

func newTestClient(t *testing.T, addrs []string, opts ...Option) *Client {
	t.Helper()
	c, err := New(addrs, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// acquire takes name, or fails the test; the lock is released at its end.
func acquire(t *testing.T, c *Client, name string, opts ...Option) *Lock {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, name, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", name, err)
	}
	t.Cleanup(func() { l.Release() })
	return l
}
