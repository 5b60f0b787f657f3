//go:build linux

package server_test

// Benchmarks of the server's CPU under load, with the clients in a child
// process (this test binary run again as TestLoadGenerator), so that
// getrusage(RUSAGE_SELF) in the benchmark counts the server's work only.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// BenchmarkHotLock is 8 contenders on one lock, each claiming it on a new
// connection, waiting for the grant and closing (the release) at once, in
// a child process. server-µs/grant is the server process's CPU per grant.
func BenchmarkHotLock(b *testing.B) { benchHotLock(b, true) }

// BenchmarkHotLockNoPark is BenchmarkHotLock with ParkIdle off.
func BenchmarkHotLockNoPark(b *testing.B) { benchHotLock(b, false) }

func benchHotLock(b *testing.B, park bool) {
	srv := batontest.StartServer(b, func(c *server.Config) { c.ParkIdle = park })
	load := startLoad(b, "hotlock", srv.Addr, 8)
	b.ResetTimer()
	start, t0 := cpuTime(), time.Now()
	load.run(b, b.N)
	cpu, wall := cpuTime()-start, time.Since(t0)
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "server-µs/grant")
	b.ReportMetric(float64(b.N)/wall.Seconds(), "grants/s")
}

// BenchmarkHeartbeatScale is heartbeats spread over many held sessions
// (10,000; BATON_BENCH_SESSIONS changes it), from 32 workers in a child
// process, so that each session is idle (parked) between its heartbeats.
// server-µs/heartbeat is the server process's CPU per heartbeat;
// B/session is the server's Go heap and stacks per open session.
func BenchmarkHeartbeatScale(b *testing.B) { benchHeartbeatScale(b, true) }

// BenchmarkHeartbeatScaleNoPark is BenchmarkHeartbeatScale with ParkIdle
// off: one reader goroutine per session, the floor's model.
func BenchmarkHeartbeatScaleNoPark(b *testing.B) { benchHeartbeatScale(b, false) }

func benchHeartbeatScale(b *testing.B, park bool) {
	n := 10000
	if v := os.Getenv("BATON_BENCH_SESSIONS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	srv := batontest.StartServer(b, func(c *server.Config) { c.ParkIdle = park })
	before := memInUse()
	load := startLoad(b, "heartbeat", srv.Addr, n)
	if park {
		// Let the last replies' readers park before measuring.
		deadline := time.Now().Add(10 * time.Second)
		for metric(b, srv.Srv.Registry(), "baton_connections_parked", "") < float64(n) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	mem := memInUse() - before
	b.ResetTimer()
	start, t0 := cpuTime(), time.Now()
	load.run(b, b.N)
	cpu, wall := cpuTime()-start, time.Since(t0)
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "server-µs/heartbeat")
	b.ReportMetric(float64(b.N)/wall.Seconds(), "heartbeats/s")
	b.ReportMetric(float64(mem)/float64(n), "B/session")
}

// cpuTime is the process's CPU time, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// memInUse is the Go heap and stacks in use, after a GC.
func memInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse + ms.StackInuse)
}

// loadProc is a load generator in a child process. It is told a number of
// operations on its stdin and says "load: done" on its stdout when they
// are all answered.
type loadProc struct {
	in  io.WriteCloser
	out *bufio.Scanner
}

func startLoad(b *testing.B, mode, addr string, n int) *loadProc {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLoadGenerator$")
	cmd.Env = append(os.Environ(), "BATON_LOAD="+mode, "BATON_LOAD_ADDR="+addr, "BATON_LOAD_N="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		in.Close() // the child's end: it closes its connections and exits
		cmd.Wait()
	})
	p := &loadProc{in: in, out: bufio.NewScanner(out)}
	p.expect(b, "ready")
	return p
}

func (p *loadProc) run(b *testing.B, ops int) {
	b.Helper()
	if _, err := fmt.Fprintf(p.in, "%d\n", ops); err != nil {
		b.Fatal(err)
	}
	p.expect(b, "done")
}

func (p *loadProc) expect(b *testing.B, word string) {
	b.Helper()
	for p.out.Scan() {
		if rest, ok := strings.CutPrefix(p.out.Text(), "load: "); ok {
			if rest != word {
				b.Fatalf("load generator: %s", rest)
			}
			return
		}
	}
	b.Fatalf("load generator ended before %q: %v", word, p.out.Err())
}

// TestLoadGenerator is the child process of the load benchmarks; it skips
// unless BATON_LOAD says what to do.
func TestLoadGenerator(t *testing.T) {
	mode := os.Getenv("BATON_LOAD")
	if mode == "" {
		t.Skip("the load generator of the load benchmarks, run in their child process")
	}
	addr := os.Getenv("BATON_LOAD_ADDR")
	n, _ := strconv.Atoi(os.Getenv("BATON_LOAD_N"))
	fail := func(err error) {
		fmt.Printf("load: %v\n", err)
		os.Exit(1)
	}
	var work func(ops int) error
	var conns []net.Conn
	switch mode {
	case "hotlock":
		work = func(ops int) error { return hotLockLoad(addr, n, ops) }
	case "heartbeat":
		var err error
		if conns, err = holdMany(addr, n); err != nil {
			fail(err)
		}
		work = func(ops int) error { return heartbeatLoad(conns, ops) }
	default:
		fail(fmt.Errorf("unknown mode %q", mode))
	}
	fmt.Println("load: ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		ops, _ := strconv.Atoi(in.Text())
		if err := work(ops); err != nil {
			fail(err)
		}
		fmt.Println("load: done")
	}
	for _, c := range conns {
		c.(*net.TCPConn).SetLinger(0) // no TIME_WAIT left behind for the next run
		c.Close()
	}
	os.Exit(0) // not the package's TestMain checks: this is no test run
}

// hotLockLoad makes ops claims of one lock from workers contenders, each
// on a new connection closed as soon as it is granted.
func hotLockLoad(addr string, workers, ops int) error {
	acq, _ := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 60000, Name: "hot"})
	var left atomic.Int64
	left.Store(int64(ops))
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if err := claimOnce(addr, acq); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// claimOnce dials, acquires, waits for the grant and closes.
func claimOnce(addr string, acq []byte) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(acq); err != nil {
		return err
	}
	for {
		f, err := readFrame(c)
		if err != nil {
			return err
		}
		switch f[0] {
		case byte(wire.TypeAcquired):
			return nil
		case byte(wire.TypeWaiting):
		default:
			return fmt.Errorf("unexpected frame % x", f)
		}
	}
}

// readFrame reads one whole frame.
func readFrame(c net.Conn) ([]byte, error) {
	buf := make([]byte, wire.HeaderSize, 32)
	if _, err := io.ReadFull(c, buf); err != nil {
		return nil, err
	}
	h, err := wire.ParseHeader(buf)
	if err != nil {
		return nil, err
	}
	buf = append(buf, make([]byte, h.Length)...)
	_, err = io.ReadFull(c, buf[wire.HeaderSize:])
	return buf, err
}

// holdMany opens n sessions, each holding a lock of its own.
func holdMany(addr string, n int) ([]net.Conn, error) {
	conns := make([]net.Conn, n)
	const dialers = 64
	errs := make(chan error, dialers)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range dialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				c, err := net.Dial("tcp", addr)
				if err != nil {
					errs <- err
					return
				}
				conns[i] = c
				acq, _ := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 600000, Name: "hb-" + strconv.Itoa(i)})
				if _, err := c.Write(acq); err != nil {
					errs <- err
					return
				}
				if f, err := readFrame(c); err != nil || f[0] != byte(wire.TypeAcquired) {
					errs <- fmt.Errorf("session %d: frame % x, %v", i, f, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return conns, <-errs
}

// heartbeatLoad sends ops heartbeats from 32 workers, each going round its
// share of the sessions, one heartbeat and its reply at a time.
func heartbeatLoad(conns []net.Conn, ops int) error {
	const workers = 32
	hb := wire.AppendHeartbeat(nil)
	reply := len(wire.AppendAcquired(nil, false, 1))
	var left atomic.Int64
	left.Store(int64(ops))
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, reply)
			for i := w; left.Add(-1) >= 0; {
				c := conns[i]
				if _, err := c.Write(hb); err != nil {
					errs <- err
					return
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					errs <- err
					return
				}
				if i += workers; i >= len(conns) {
					i = w
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
