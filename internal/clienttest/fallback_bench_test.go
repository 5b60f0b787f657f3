package clienttest

import (
	"context"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
)

// BenchmarkVersionFallback measures what protocol version 3 costs a claim
// on a server that does not speak it: the first claim of a Client to an
// address is sent as version 3, answered VERSION, and sent again as
// version 1 on a new connection (one more connection and round trip);
// the Client then remembers the address for a minute. Each iteration
// takes and releases one uncontended lock, on loopback:
//
//	go test -run '^$' -bench BenchmarkVersionFallback -benchtime 2000x ./internal/clienttest
func BenchmarkVersionFallback(b *testing.B) {
	srv := batontest.StartServer(b)
	for _, bc := range []struct {
		name      string
		perClaim  bool // a new Client for every claim: nothing remembered
		resumeOff bool
	}{
		{"new Client, version 3 then 1", true, false},
		{"new Client, WithResume(false)", true, true},
		{"one Client, remembered", false, false},
		{"one Client, WithResume(false)", false, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			opts := []baton.Option{baton.WithLease(10 * time.Second), baton.WithResume(!bc.resumeOff)}
			c, err := baton.New([]string{srv.Addr}, opts...)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if bc.perClaim {
					c, _ = baton.New([]string{srv.Addr}, opts...)
				}
				l, err := c.Acquire(ctx, "bench/fallback")
				if err != nil {
					b.Fatal(err)
				}
				l.Release()
			}
		})
	}
}
