package cli

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
)

// TestBinaryDescriptorFlood: a flood of sessions from many addresses takes
// every descriptor of a server under ulimit -n 256. A claim with a lease
// longer than any before must be written to the data directory before it
// is granted; it got OVERLOADED 'cannot record lease 45s for crash
// recovery' when it was let in with the last descriptor. Now the server
// keeps descriptors of its own that sessions never get: a new session is
// refused at the door while only those are left, and one let in is
// granted, its lease recorded.
func TestBinaryDescriptorFlood(t *testing.T) {
	t.Parallel()
	bin := buildBaton(t)
	cmd := exec.Command("sh", "-c", `ulimit -n 256 && exec "$0" "$@"`, bin, "serve",
		"-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-log-format=json", "-data-dir", t.TempDir())
	l := startLogged(t, cmd)
	sl := waitServing(t, l.next)
	go func() {
		for range l.lines {
		}
	}()

	// claim opens a session from address from and sends its ACQUIRE; it
	// returns the connection and the first frame within d: nil and the
	// error if none came (io.EOF: closed unanswered; a timeout: not
	// accepted yet, or not answered).
	claim := func(from, name string, lease time.Duration, d time.Duration) (net.Conn, *frame, error) {
		dl := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		c, err := dl.Dial("tcp", sl.Addr)
		if err != nil {
			return nil, nil, err
		}
		b, _ := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: uint32(lease.Milliseconds()), Name: name})
		c.Write(b)
		f, err := readOneFrame(c, d)
		return c, f, err
	}
	warm, f, err := claim("127.0.0.1", "warm", 30*time.Second, 5*time.Second)
	if err != nil || f.typ != wire.TypeAcquired {
		t.Fatalf("warm-up claim: %v %v", f, err)
	}
	warm.Close() // its 30 s are recorded: the flood's claims write nothing

	var flood []net.Conn
	t.Cleanup(func() {
		for _, c := range flood {
			c.Close()
		}
	})
	for i := 0; ; i++ {
		from := fmt.Sprintf("127.0.0.%d", 11+i%8)
		c, f, err := claim(from, fmt.Sprint("flood-", i), 30*time.Second, time.Second)
		if err == nil && f.typ == wire.TypeAcquired {
			flood = append(flood, c)
			continue
		}
		if c != nil {
			c.Close() // not let in: refused at the door, or left in the backlog
		}
		if i > 1000 || (err == nil && f.typ == wire.TypeError && !strings.Contains(f.msg, "connections")) {
			t.Fatalf("flood claim %d: %v %v", i, f, err)
		}
		t.Logf("flood: %d sessions from 8 addresses hold every descriptor; the next: %v %v", len(flood), f, err)
		break
	}

	// One flooding session leaves: one descriptor comes free. A claim
	// with a longer lease, which the server must write down before it
	// grants it, is refused at the door while no descriptor is free but
	// the server's own (the close is not seen yet), and then let in with
	// that one, and granted: never let in and refused for the write.
	flood[0].Close()
	flood = flood[1:]
	for attempt := 1; ; attempt++ {
		c, f, err := claim("127.0.0.2", "team-b/job", 45*time.Second, 3*time.Second)
		if c != nil {
			c.Close()
		}
		if err == nil {
			if f.typ != wire.TypeAcquired {
				t.Fatalf("attempt %d, beside %d flooding sessions: got %v, want ACQUIRED or a refusal at the door", attempt, len(flood), f)
			}
			t.Logf("attempt %d: granted beside %d flooding sessions", attempt, len(flood))
			break
		}
		if attempt == 40 {
			t.Fatalf("40 attempts not answered: %v", err)
		}
		t.Logf("attempt %d: %v", attempt, err)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			flood[0].Close() // not accepted: one more descriptor comes free
			flood = flood[1:]
			continue
		}
		time.Sleep(50 * time.Millisecond) // refused at the door: until the server sees the close
	}

	// The refusals at the door are counted: past the connections that
	// leave the rest of the process its descriptors (the ops listener's,
	// files'), or, should those run out anyway, with the last ones.
	for _, c := range flood {
		c.Close()
	}
	flood = nil
	hc := &http.Client{Timeout: 5 * time.Second}
	batontest.Eventually(t, 10*time.Second, func() bool {
		return metricValue(t, hc, sl.OpsAddr, `baton_limit_refusals_total{limit="descriptors"}`)+
			metricValue(t, hc, sl.OpsAddr, `baton_limit_refusals_total{limit="connections"}`) >= 1
	}, `baton_limit_refusals_total{limit="descriptors"} and {limit="connections"} stay 0`)
}

// metricValue is the value of the series named (with its labels) on the
// ops listener's /metrics, 0 if it is not there or cannot be read.
func metricValue(t *testing.T, hc *http.Client, ops, series string) float64 {
	resp, err := hc.Get("http://" + ops + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

type frame struct {
	typ wire.Type
	msg string
}

func (f *frame) String() string {
	if f == nil {
		return "no frame"
	}
	if f.typ == wire.TypeError {
		return fmt.Sprintf("ERROR %q", f.msg)
	}
	return f.typ.String()
}

// readOneFrame reads a frame from c within d.
func readOneFrame(c net.Conn, d time.Duration) (*frame, error) {
	c.SetReadDeadline(time.Now().Add(d))
	hdr := make([]byte, wire.HeaderSize)
	if _, err := io.ReadFull(c, hdr); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		return nil, err
	}
	h, err := wire.ParseHeader(hdr)
	if err != nil {
		return nil, err
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(c, p); err != nil {
		return nil, err
	}
	f := &frame{typ: h.Type}
	if h.Type == wire.TypeError {
		if e, err := wire.DecodeError(p); err == nil {
			f.msg = e.Msg
		}
	}
	return f, nil
}
