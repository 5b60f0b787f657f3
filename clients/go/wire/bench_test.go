package wire_test

import (
	"testing"

	"github.com/batonlock/baton/clients/go/wire"
)

var sink []byte

func BenchmarkParseHeader(b *testing.B) {
	frame := wire.AppendHeartbeat(nil)
	b.ReportAllocs()
	for b.Loop() {
		h, err := wire.ParseHeader(frame)
		if err != nil || h.Type != wire.TypeHeartbeat {
			b.Fatal(h, err)
		}
	}
}

func BenchmarkDecodeAcquire(b *testing.B) {
	_, p, _, err := wire.Split(mustHex(vectors[1].hex))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		a, err := wire.DecodeAcquire(p)
		if err != nil || a.LeaseMs != 1 {
			b.Fatal(a, err)
		}
	}
}

func BenchmarkAppendHeartbeat(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = wire.AppendHeartbeat(buf[:0])
	}
	sink = buf
}

func BenchmarkAppendAcquired(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = wire.AppendAcquired(buf[:0], true, 0x0100000000000002)
	}
	sink = buf
}

func BenchmarkAppendWaiting(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = wire.AppendWaiting(buf[:0], 3)
	}
	sink = buf
}

// BenchmarkSplitReply is the client's side of a heartbeat: find the reply
// frame in the read buffer and decode it.
func BenchmarkSplitReply(b *testing.B) {
	buf := wire.AppendAcquired(nil, false, 42)
	b.ReportAllocs()
	for b.Loop() {
		h, p, n, err := wire.Split(buf)
		if err != nil || n != len(buf) || h.Type != wire.TypeAcquired {
			b.Fatal(h, n, err)
		}
		if _, tok, err := wire.DecodeAcquired(p); err != nil || tok != 42 {
			b.Fatal(tok, err)
		}
	}
}

func BenchmarkAppendAcquire(b *testing.B) {
	buf := make([]byte, 0, wire.MaxFrame)
	a := wire.Acquire{Version: wire.Version, LeaseMs: 10000, Name: "jobs/nightly", Owner: "host:1234"}
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = wire.AppendAcquire(buf[:0], a); err != nil {
			b.Fatal(err)
		}
	}
	sink = buf
}
