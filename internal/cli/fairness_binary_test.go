package cli

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/batonlock/baton/clients/go/wire"
)

// TestBinaryPipeliningBesideShortLeases: sessions that pipeline heartbeats
// without pause (allowed: each gets its answer), from a process of their
// own, must not keep the real server from answering other holders in time,
// at the shortest lease baton run allows (250 ms): 400 flooding sessions
// took every holder of 200 (all 200 lost, with the reader of each flooding
// session its own goroutine, a write per frame, and the server's mutex
// taken 300,000 times a second). Each of 200 holders heartbeats every
// quarter lease, and every answer must reach its socket (the kernel's
// receive time, whatever the holders' own process is doing) within
// 137 ms of the heartbeat: then no confirmation is ever 200 ms (0.8 x
// lease) apart, and no holder loses its lock. No flooding session is
// ended for its flood. Three floods: whole frames in bursts, bursts that
// end inside a frame, and TLS (whose sessions are read by goroutines).
func TestBinaryPipeliningBesideShortLeases(t *testing.T) {
	if spec := os.Getenv("BATON_TEST_PIPELINE_CHILD"); spec != "" {
		pipelineChild(t, spec)
		return
	}
	if os.Getenv("BATON_TEST_ECHO_CHILD") != "" {
		echoChild(t)
		return
	}
	if testing.Short() {
		t.Skip("seconds of load; skipped in -short mode")
	}
	for _, tt := range []struct {
		name          string
		offset, burst int // the flood's stream from offset, in writes of burst bytes
		tls           bool
	}{
		{"whole frames", 0, 3072, false},
		{"bursts that end inside a frame", 1, 12, false},
		{"TLS", 0, 3072, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.tls && raceEnabled {
				// The flood and the holders run in this binary: under the
				// race detector their TLS takes the machine, and the
				// holders' own process is late, not the server.
				t.Skip("TLS clients under the race detector measure the clients; run without -race")
			}
			testPipeliningBeside(t, tt.offset, tt.burst, tt.tls)
		})
	}
}

func testPipeliningBeside(t *testing.T, offset, burst int, useTLS bool) {
	floods, holders := 400, 200
	if raceEnabled {
		// The flood and the holders run in this binary, which the race
		// detector makes many times costlier: half as many, so that they
		// do not take the machine from the server (which runs without it).
		floods, holders = 200, 100
	}
	const (
		lease  = 250 * time.Millisecond
		window = 3 * time.Second
		// The longest an answer may take: a holder confirmed at most every
		// quarter lease plus this stays confirmed (0.8 x lease).
		maxAnswer = lease*8/10 - lease/4
	)
	args := []string{"serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-log-format=json"}
	var caFile string
	if useTLS {
		p := newPKI(t)
		caFile = p.caFile
		args = append(args, "-tls-cert", p.server.Cert, "-tls-key", p.server.Key, "-ops-tls-cert=none")
	}
	cmd := batonCmd(t, args...)
	l := startLogged(t, cmd)
	sl := waitServing(t, l.next)
	go func() {
		for range l.lines {
		}
	}()

	child := exec.Command(os.Args[0], "-test.run=^TestBinaryPipeliningBesideShortLeases$")
	child.Env = append(os.Environ(), fmt.Sprintf("BATON_TEST_PIPELINE_CHILD=%s,%d,%d,%d,%s", sl.Addr, floods, offset, burst, caFile))
	stdin, _ := child.StdinPipe() // the child ends its flood when it closes
	stdout, _ := child.StdoutPipe()
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Wait()
	defer stdin.Close()
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); err != nil || !strings.HasPrefix(line, "flooding") {
		t.Fatalf("flood child: %q, %v", line, err)
	}

	// The control: a process that answers heartbeats and does nothing
	// else, beside the server. How late its answers come is how long this
	// machine, loaded as it is now, keeps any process from running; the
	// server is answerable for what comes later than that.
	echo := exec.Command(os.Args[0], "-test.run=^TestBinaryPipeliningBesideShortLeases$")
	echo.Env = append(os.Environ(), "BATON_TEST_ECHO_CHILD=1")
	echoIn, _ := echo.StdinPipe()
	echoOut, _ := echo.StdoutPipe()
	echo.Stderr = os.Stderr
	if err := echo.Start(); err != nil {
		t.Fatal(err)
	}
	defer echo.Wait()
	defer echoIn.Close()
	echoAddr, err := bufio.NewReader(echoOut).ReadString('\n')
	if err != nil {
		t.Fatalf("echo child: %v", err)
	}
	echoAddr = strings.TrimSpace(echoAddr)

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		answers []time.Duration // from a heartbeat's send to its answer's arrival
		control time.Duration   // the latest answer of the control
		failed  []string
	)
	cpu0, start := procCPU(cmd.Process.Pid), time.Now()
	fail := func(format string, a ...any) {
		mu.Lock()
		failed = append(failed, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	stop := time.Now().Add(window)
	for range 20 { // the control's holders
		c, sc, err := dialStamped(echoAddr, "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				time.Sleep(lease / 4)
				c.Write(wire.AppendHeartbeat(nil))
				sent := time.Now()
				if _, err := readOneFrame(c, 5*time.Second); err != nil {
					return
				}
				mu.Lock()
				control = max(control, sc.last.Sub(sent))
				mu.Unlock()
			}
		}()
	}
	var clientLate []string // holders that did not send in time themselves
	for i := range holders {
		// One at a time (200 TLS handshakes at once would take the
		// holders' own process from them), each heartbeating from its
		// grant on.
		c, sc, err := dialStamped(sl.Addr, caFile)
		if err != nil {
			t.Fatalf("holder %d: %v", i, err)
		}
		defer c.Close()
		b, _ := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: uint32(lease.Milliseconds()), Name: "holder-" + strconv.Itoa(i)})
		c.Write(b)
		if f, err := readOneFrame(c, 5*time.Second); err != nil || f.typ != wire.TypeAcquired {
			t.Fatalf("holder %d: ACQUIRE answered %v %v", i, f, err)
		}
		wg.Add(1)
		go func() { // a client keeping to the model: one heartbeat a quarter lease, one in flight
			defer wg.Done()
			last, longest := time.Now(), time.Duration(0) // the longest time between two sends
			for time.Now().Before(stop) {
				time.Sleep(lease / 4)
				c.Write(wire.AppendHeartbeat(nil))
				sent := time.Now() // after the write: the heartbeat is in the kernel
				longest, last = max(longest, sent.Sub(last)), sent
				f, err := readOneFrame(c, 5*time.Second)
				if err != nil || f.typ != wire.TypeAcquired {
					// A holder that keeps to the model sends every quarter
					// lease; one that waited twice that was late itself.
					if longest > lease/2 {
						mu.Lock()
						clientLate = append(clientLate, fmt.Sprintf("holder %d: %v after its own process sent nothing for %v", i, f, longest.Round(time.Millisecond)))
						mu.Unlock()
						return
					}
					fail("holder %d: heartbeat answered %v %v, though it sent every %v at most", i, f, err, longest.Round(time.Millisecond))
					return
				}
				mu.Lock()
				answers = append(answers, sc.last.Sub(sent))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	cpu := (procCPU(cmd.Process.Pid) - cpu0).Seconds() / time.Since(start).Seconds()
	stdin.Close()
	line, _ := out.ReadString('\n')
	var answered, ended, stalled int
	fmt.Sscanf(line, "answered %d ended %d stalled %d", &answered, &ended, &stalled)
	if stalled > 0 {
		t.Logf("%d flooding sessions left a frame unfinished for io-timeout (their own process stalled) and were ended for it", stalled)
	}

	sort.Slice(answers, func(i, j int) bool { return answers[i] < answers[j] })
	q := func(p float64) time.Duration {
		if len(answers) == 0 {
			return 0
		}
		return answers[int(p*float64(len(answers)-1))].Round(10 * time.Microsecond)
	}
	// The bound: an answer within maxAnswer keeps every holder confirmed;
	// on a machine that keeps any process waiting longer (the control's
	// latest answer), the server is held to that, and a margin.
	bound := max(maxAnswer, control+machineMargin)
	late := len(answers) - sort.Search(len(answers), func(i int) bool { return answers[i] > bound })
	t.Logf("%d holders on %v leases beside %d flooding sessions (%d of their frames answered in %v; the server used %.0f%% of a CPU): %d answers, p50 %v, p99 %v, max %v; %d later than %v (the control's latest %v)",
		holders, lease, floods, answered, window, 100*cpu, len(answers), q(0.5), q(0.99), q(1), late, bound, control.Round(10*time.Microsecond))
	if len(clientLate) > 0 {
		t.Logf("%d holders ended after their own process was late (the machine, not the server): %s", len(clientLate), strings.Join(clientLate[:min(3, len(clientLate))], "; "))
	}
	if len(failed) > 0 && control < lease/2 {
		t.Fatalf("%d holders failed: %s", len(failed), strings.Join(failed[:min(3, len(failed))], "; "))
	}
	if len(failed) > 0 {
		t.Logf("%d holders ended by the server, beside a machine that kept the control %v from answering (more than the half lease they had): %s",
			len(failed), control.Round(time.Millisecond), strings.Join(failed[:min(3, len(failed))], "; "))
	}
	if late > 0 {
		t.Fatalf("%d of %d answers to holders' heartbeats came later than %v (max %v): a holder can lose its lock beside a flood", late, len(answers), bound, q(1))
	}
	// A flood, however large, is answered at the server's pace: it may not
	// keep the server busy, for a busy process waits for the system's
	// other processes before it reads a heartbeat.
	if cpu > maxFloodCPU {
		t.Fatalf("the server used %.0f%% of a CPU beside the flood, want at most %.0f%%: the flood is not read at the server's pace", 100*cpu, 100*maxFloodCPU)
	}
	if ended > 0 {
		t.Fatalf("%d of %d flooding sessions ended: a flood is read less often, never ended", ended, floods)
	}
	if answered == 0 {
		t.Fatal("no flooding heartbeat answered")
	}
}

// machineMargin is how much later than the control's latest answer (see
// TestBinaryPipeliningBesideShortLeases) the server's may come on a
// machine that stalls processes for longer than a holder can wait.
const machineMargin = 50 * time.Millisecond

// echoChild answers every HEARTBEAT of every connection to a listener of
// its own with an ACQUIRED, and does nothing else, until stdin closes.
func echoChild(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(ln.Addr())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				reply := wire.AppendAcquired(nil, false, 1)
				var hdr [wire.HeaderSize]byte
				for {
					if _, err := io.ReadFull(c, hdr[:]); err != nil {
						return
					}
					c.Write(reply)
				}
			}()
		}
	}()
	io.Copy(io.Discard, os.Stdin)
	ln.Close()
}

// maxFloodCPU is the most of a CPU that the server may use beside the
// flood of TestBinaryPipeliningBesideShortLeases: what the idle poller's
// pace allows (moreTurn reads a millisecond in each shard), the holders'
// heartbeats and TLS, with room for a slow machine.
const maxFloodCPU = 0.7

// procCPU is the user and system CPU time of process pid so far.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // in clock ticks of 1/100 s (USER_HZ)
}

// stampConn is a TCP connection whose reads note when the kernel received
// the bytes they return (SO_TIMESTAMPNS): a time that no scheduling of the
// reading process delays.
type stampConn struct {
	*net.TCPConn
	raw  syscall.RawConn
	last time.Time // of the latest bytes read
}

// dialStamped dials addr as dialFor(caFile) would, over a stampConn, and
// returns the connection to read frames from and the stampConn under it.
func dialStamped(addr, caFile string) (net.Conn, *stampConn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	tc := c.(*net.TCPConn)
	raw, err := tc.SyscallConn()
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	var serr error
	raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) })
	if serr != nil {
		c.Close()
		return nil, nil, serr
	}
	sc := &stampConn{TCPConn: tc, raw: raw}
	if caFile == "" {
		return sc, sc, nil
	}
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(caFile)
	pool.AppendCertsFromPEM(pem)
	tlc := tls.Client(sc, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err := tlc.Handshake(); err != nil {
		c.Close()
		return nil, nil, err
	}
	return tlc, sc, nil
}

func (c *stampConn) Read(p []byte) (int, error) {
	oob := make([]byte, unix.CmsgSpace(16))
	var n, oobn int
	var rerr error
	err := c.raw.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), p, oob, 0)
		return rerr != unix.EAGAIN
	})
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, rerr
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	c.last = time.Now()
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
				sec, nsec := binary.NativeEndian.Uint64(m.Data[0:8]), binary.NativeEndian.Uint64(m.Data[8:16])
				c.last = time.Unix(int64(sec), int64(nsec))
			}
		}
	}
	return n, nil
}

// dialFor dials plain TCP, or TLS trusting the CA in caFile.
func dialFor(caFile string) func(addr string) (net.Conn, error) {
	if caFile == "" {
		return func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }
	}
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(caFile)
	pool.AppendCertsFromPEM(pem)
	return func(addr string) (net.Conn, error) {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}

// pipelineChild opens the sessions of spec ("addr,n,offset,burst,caFile"),
// each on a lock of its own, and pipelines heartbeats on every one as
// fast as the server answers, the stream of frames cut into writes of
// burst bytes from offset, until stdin closes; then it prints how many
// were answered and how many sessions the server ended.
func pipelineChild(t *testing.T, spec string) {
	f := strings.Split(spec, ",")
	addr, caFile := f[0], f[4]
	n, _ := strconv.Atoi(f[1])
	offset, _ := strconv.Atoi(f[2])
	burstBytes, _ := strconv.Atoi(f[3])
	var (
		answered, ended, stalled atomic.Int64
		done                     atomic.Bool
		wg                       sync.WaitGroup
	)
	stream := make([]byte, 0, 3*4096)
	for range 4096 {
		stream = wire.AppendHeartbeat(stream)
	}
	burst := stream[offset : offset+burstBytes] // a whole number of frames long: the stream goes on
	dial := dialFor(caFile)
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := dial(addr)
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
		c.Write(stream[:offset]) // the first frame begun
		wg.Add(2)
		go func() { // the replies: ACQUIRED, until an ERROR or the end
			defer wg.Done()
			buf := make([]byte, 64<<10)
			var have []byte
			for {
				m, err := c.Read(buf)
				if err != nil {
					if !done.Load() {
						ended.Add(1)
					}
					return
				}
				have = append(have, buf[:m]...)
				for len(have) >= wire.HeaderSize {
					h, _ := wire.ParseHeader(have)
					n := wire.HeaderSize + int(h.Length)
					if len(have) < n {
						break
					}
					if h.Type == wire.TypeError {
						// A frame of its own left unfinished for io-timeout
						// is this process's stall, not the flood's end.
						if e, err := wire.DecodeError(have[wire.HeaderSize:n]); err == nil && strings.Contains(e.Msg, "io-timeout") {
							stalled.Add(1)
						} else {
							ended.Add(1)
						}
						return
					}
					answered.Add(1)
					have = have[n:]
				}
			}
		}()
		go func() { // without pause: a write waits only for the socket's buffer
			defer wg.Done()
			for !done.Load() {
				if _, err := c.Write(burst); err != nil {
					return
				}
			}
		}()
	}
	io.Copy(io.Discard, os.Stdin)
	done.Store(true)
	fmt.Printf("answered %d ended %d stalled %d\n", answered.Load(), ended.Load(), stalled.Load())
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
}
