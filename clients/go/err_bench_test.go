package baton

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// BenchmarkLockErr is the cost of Lock.Err on a held lock, the question
// asked before every step: a reading of the clock and two atomics.
//
//	go test -run '^$' -bench LockErr -benchmem .
func BenchmarkLockErr(b *testing.B) {
	c, err := New([]string{"pipe:1"}, WithLease(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	c.dial = func(context.Context, string, *settings) (net.Conn, net.Conn, error) {
		cc, sc := net.Pipe()
		go func() { // the server: grants at once, then reads on
			var buf [wire.HeaderSize + wire.MaxFrame]byte
			sc.Read(buf[:])
			sc.Write(wire.AppendAcquired(nil, false, 1))
			io.Copy(io.Discard, sc)
		}()
		return cc, cc, nil
	}
	l, err := c.Acquire(context.Background(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Release() })
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Err(); err != nil {
			b.Fatal(err)
		}
	}
}
