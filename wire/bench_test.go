package wire_test

import (
	"testing"

	"github.com/batonlock/baton/wire"
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
