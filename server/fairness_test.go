package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
)

// TestPipeliningSessionsDoNotStarveHolders: sessions that pipeline
// heartbeats without pause (allowed: each gets its answer) must not take
// the server from well-behaved holders. 400 flooding sessions, in a
// process of their own, beside 50 holders with 1 s leases that beat
// every 250 ms: no holder may lose its lock, and no flooding session is
// ended for its flood. (Without turns, 11 to 33 of the 50 lost their lock
// here; with 400 ms leases a loaded 2-core machine alone could make them
// lose it.)
func TestPipeliningSessionsDoNotStarveHolders(t *testing.T) {
	if addr := os.Getenv("BATON_TEST_FLOOD_CHILD"); addr != "" {
		floodChild(t, addr)
		return
	}
	if testing.Short() {
		t.Skip("a few seconds of load; skipped in -short mode")
	}
	const floods, holders, window = 400, 50, 3 * time.Second
	ts := batontest.StartServer(t)

	cmd := exec.Command(os.Args[0], "-test.run=^TestPipeliningSessionsDoNotStarveHolders$")
	cmd.Env = append(os.Environ(), "BATON_TEST_FLOOD_CHILD="+ts.Addr+","+strconv.Itoa(floods))
	stdin, _ := cmd.StdinPipe() // the child ends its flood when it closes
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); err != nil || !strings.HasPrefix(line, "flooding") {
		t.Fatalf("flood child: %q, %v", line, err)
	}

	var (
		wg   sync.WaitGroup
		lost atomic.Int64
		mu   sync.Mutex
		why  []string
	)
	stop := time.Now().Add(window)
	for i := range holders {
		c := batontest.Dial(t, ts.Addr)
		c.Acquire("holder-"+strconv.Itoa(i), time.Second, false, "")
		if f := c.ReadFrame(frameWait); f.Type != wire.TypeAcquired {
			t.Fatalf("holder %d: got %v, want ACQUIRED", i, f)
		}
		wg.Add(1)
		go func() { // a client keeping to the model: one heartbeat a quarter lease
			defer wg.Done()
			for time.Now().Before(stop) {
				time.Sleep(250 * time.Millisecond)
				c.Heartbeat()
				f, err := c.TryReadFrame(2 * time.Second)
				if err != nil || f.Type != wire.TypeAcquired {
					lost.Add(1)
					mu.Lock()
					why = append(why, fmt.Sprintf("holder %d: %v %v", i, f, err))
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	stdin.Close()
	line, _ := out.ReadString('\n')
	var answered, ended int
	fmt.Sscanf(line, "answered %d ended %d", &answered, &ended)
	t.Logf("%d flooding sessions had %d heartbeats answered in %v; %d of %d holders lost their lock", floods, answered, window, lost.Load(), holders)
	if n := lost.Load(); n > 0 {
		t.Fatalf("%d of %d holders lost their lock beside %d flooding sessions: %s", n, holders, floods, strings.Join(why[:min(3, len(why))], "; "))
	}
	if ended > 0 {
		t.Fatalf("%d of %d flooding sessions ended: a flood is read less often, never ended", ended, floods)
	}
	if answered == 0 {
		t.Fatalf("no flooding heartbeat answered")
	}
}

// floodChild opens n sessions to addr (its value "addr,n"), each on a lock
// of its own, and pipelines heartbeats on every one as fast as the server
// answers, until stdin closes; then it prints how many were answered and
// how many sessions the server ended.
func floodChild(t *testing.T, spec string) {
	addr, nText, _ := strings.Cut(spec, ",")
	n, _ := strconv.Atoi(nText)
	var (
		answered, ended atomic.Int64
		done            atomic.Bool
		wg              sync.WaitGroup
	)
	burst := make([]byte, 0, 3*1024)
	for range 1024 {
		burst = wire.AppendHeartbeat(burst)
	}
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		frame, _ := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 60000, Name: "flood-" + strconv.Itoa(i)})
		c.Write(frame)
		var reply [12]byte
		if _, err := io.ReadFull(c, reply[:]); err != nil || wire.Type(reply[0]) != wire.TypeAcquired {
			t.Fatalf("flood %d: % x %v", i, reply, err)
		}
	}
	fmt.Println("flooding")
	for _, c := range conns {
		wg.Add(2)
		// inFlight counts the frames sent and not yet answered.
		var inFlight atomic.Int64
		go func() { // the replies, 12 bytes each (ACQUIRED)
			defer wg.Done()
			buf := make([]byte, 64<<10)
			rest := 0
			for {
				m, err := c.Read(buf)
				if err != nil {
					if !done.Load() {
						ended.Add(1)
					}
					return
				}
				if buf[0] == byte(wire.TypeError) && rest == 0 {
					ended.Add(1)
					return
				}
				rest += m
				answered.Add(int64(rest / 12))
				inFlight.Add(-int64(rest / 12))
				rest %= 12
			}
		}()
		go func() { // without pause: a burst whenever fewer are in flight
			defer wg.Done()
			for !done.Load() {
				if inFlight.Load() > 4096 {
					time.Sleep(time.Millisecond)
					continue
				}
				inFlight.Add(1024)
				if _, err := c.Write(burst); err != nil {
					return
				}
			}
		}()
	}
	io.Copy(io.Discard, os.Stdin)
	done.Store(true)
	fmt.Printf("answered %d ended %d\n", answered.Load(), ended.Load())
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
}
