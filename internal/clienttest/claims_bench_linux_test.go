package clienttest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
)

// BenchmarkUncontendedClaims: 16 workers each take and release a lock of
// their own as fast as they can, against a real server on loopback (in
// this process: the figure includes the server's CPU), releasing with a
// reset (the default) or a normal close. claims/s is the rate; timewait
// is the client's sockets to the server left in TIME_WAIT at the end (each
// costs the kernel's port search of every later connect); cpu-µs/claim is
// the process's CPU time (user and system, client and server) per claim,
// which holds up better than the rate on a machine shared with other work.
//
//	go test -run '^$' -bench UncontendedClaims -benchtime 20000x .
func BenchmarkUncontendedClaims(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []baton.Option
	}{
		{"reset", nil},
		{"normal_close", []baton.Option{baton.WithNormalClose(true)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ts := batontest.StartServer(b)
			c, err := baton.New([]string{ts.Addr}, bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			_, p, _ := net.SplitHostPort(ts.Addr)
			port, _ := strconv.Atoi(p)
			const workers = 16
			b.SetParallelism((workers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			var id atomic.Int64
			ctx := context.Background()
			b.ResetTimer()
			cpu0 := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				name := fmt.Sprintf("bench/claim/%d", id.Add(1))
				for pb.Next() {
					l, err := c.Acquire(ctx, name)
					if err != nil {
						b.Error(err)
						return
					}
					l.Release()
				}
			})
			b.StopTimer()
			cpu := cpuTime() - cpu0
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/claim")
			b.ReportMetric(float64(timeWaitTo(b, port)), "timewait")
		})
	}
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// timeWaitTo counts this host's TCP sockets in TIME_WAIT whose remote port
// is port: the client's side of connections to a server on port.
func timeWaitTo(tb testing.TB, port int) int {
	n := 0
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan()
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 3 && fields[3] == "06" && hexPort(fields[2]) == port {
				n++
			}
		}
		if err := sc.Err(); err != nil {
			tb.Fatal(err)
		}
		f.Close()
	}
	return n
}
