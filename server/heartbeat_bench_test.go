package server

import (
	"net"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// BenchmarkHeartbeatAnswer is the server's part of one HEARTBEAT of a
// holder, without the sockets: the clock, the mutex, the table's Seen and
// the queued reply. BenchmarkHeartbeat measures the same through the
// loopback; this one shows what the clock costs beside the rest.
//
//	go test -run '^$' -bench HeartbeatAnswer -benchmem ./server
func BenchmarkHeartbeatAnswer(b *testing.B) {
	cfg := DefaultConfig()
	var next uint64
	cfg.NextToken = func() uint64 { next++; return next }
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	client, conn := net.Pipe()
	b.Cleanup(func() { client.Close(); conn.Close() })
	c := newSession(s, 1, conn)
	if _, msg, ok, _ := c.acquire(wire.Acquire{Version: 1, LeaseMs: uint32(time.Minute / time.Millisecond), Name: "bench"}, true); !ok {
		b.Fatalf("acquire: %s", msg)
	}
	b.ReportAllocs()
	for b.Loop() {
		c.out = c.out[:0] // the reply is written elsewhere
		if !c.heartbeat() {
			b.Fatal("the session ended")
		}
	}
}
