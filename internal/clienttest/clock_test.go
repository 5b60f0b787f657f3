package clienttest

import (
	"context"
	"testing"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
)

// BenchmarkLockErr is the cost of the question asked before each step of
// work: Lock.Err, which reads the clock.
func BenchmarkLockErr(b *testing.B) {
	srv := batontest.StartServer(b)
	c, err := baton.New([]string{srv.Addr})
	if err != nil {
		b.Fatal(err)
	}
	l, err := c.Acquire(context.Background(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Release()
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Err(); err != nil {
			b.Fatal(err)
		}
	}
}
