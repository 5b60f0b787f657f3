package server_test

import (
	"crypto/tls"
	"io"
	"net"
	"testing"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/testcerts"
	"github.com/batonlock/baton/server"
)

// BenchmarkHeartbeatTLS is BenchmarkHeartbeat over mutual TLS with access
// rules: compare with BenchmarkHeartbeat and BenchmarkLoopbackRTT.
func BenchmarkHeartbeatTLS(b *testing.B) {
	ca := testcerts.NewCA(b, "ca")
	acl, err := server.ParseACL([]byte(`{"rules": [{"clients": ["bench"], "locks": ["bench"]}]}`))
	if err != nil {
		b.Fatal(err)
	}
	s := startTLS(b, ca, []*testcerts.CA{ca}, func(c *server.Config) { c.ACL = acl })
	c, err := dialTLS(b, s.ts.Addr, s.clientConfig(ca.Client(b, "bench")))
	if err != nil {
		b.Fatal(err)
	}
	heartbeatLoop(b, c)
}

// BenchmarkSessionPlain is a whole session: connect, ACQUIRE, the grant,
// close. BenchmarkSessionTLS is the same with a mutual TLS handshake and
// an access-rules check: the price of the set-up, paid once per lock.
func BenchmarkSessionPlain(b *testing.B) {
	ts := batontest.StartServer(b)
	benchSession(b, ts.Addr, nil)
}

func BenchmarkSessionTLS(b *testing.B) {
	ca := testcerts.NewCA(b, "ca")
	acl, err := server.ParseACL([]byte(`{"rules": [{"clients": ["bench"], "locks": ["bench"]}]}`))
	if err != nil {
		b.Fatal(err)
	}
	s := startTLS(b, ca, []*testcerts.CA{ca}, func(c *server.Config) { c.ACL = acl })
	benchSession(b, s.ts.Addr, s.clientConfig(ca.Client(b, "bench")))
}

func benchSession(b *testing.B, addr string, cfg *tls.Config) {
	acq, err := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 60000, Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	var buf [wire.MaxFrame]byte
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		conn := nc
		if cfg != nil {
			conn = tls.Client(nc, cfg)
		}
		if _, err := conn.Write(acq); err != nil {
			b.Fatal(err)
		}
		for { // WAITING first if the last release is not through yet
			if _, err := io.ReadFull(conn, buf[:wire.HeaderSize]); err != nil {
				b.Fatal(err)
			}
			h, err := wire.ParseHeader(buf[:wire.HeaderSize])
			if err == nil {
				_, err = io.ReadFull(conn, buf[wire.HeaderSize:wire.HeaderSize+int(h.Length)])
			}
			if err != nil || h.Type == wire.TypeError {
				b.Fatalf("grant: %v %v", h.Type, err)
			}
			if h.Type == wire.TypeAcquired {
				break
			}
		}
		nc.Close() // the release; the next session finds the lock free, or queues briefly
	}
}

// BenchmarkACLMayAcquire is the rules check of one ACQUIRE against a file
// of 100 rules, the match in the last one.
func BenchmarkACLMayAcquire(b *testing.B) {
	text := `{"rules": [`
	for i := range 99 {
		text += `{"clients": ["client-` + string(rune('a'+i%26)) + `-x"], "locks": ["team-a/", "team-b/", "team-c/"]},`
	}
	text += `{"clients": ["svc.example.org"], "locks": ["jobs/"]}]}`
	acl, err := server.ParseACL([]byte(text))
	if err != nil {
		b.Fatal(err)
	}
	ids := []string{"worker", "svc.example.org", "spiffe://example.org/w"}
	b.ReportAllocs()
	for b.Loop() {
		if !acl.MayAcquire(ids, "jobs/nightly") {
			b.Fatal("refused")
		}
	}
}
