package cli

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
)

// Protocol version 3 on a cluster of three real `baton serve` nodes, with
// raw holders and waiters: SIGTERM of the leader keeps every claim and
// every waiter's place; kill -9 of the leader keeps every holder whose
// deadline had not passed.

// waitGiving waits until the leader at addr gives credentials (every voter
// recorded as speaking version 3, the key created).
func waitGiving(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c := batontest.Dial(t, addr)
		c.AcquireV3("probe/credentials", time.Second, false, 1, true, "")
		f, err := c.TryReadFrame(5 * time.Second)
		c.Conn.Close()
		if err == nil && f.WithCredential {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader at %s never gave a credential (last answer %v, %v)", addr, f, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// confirm sends a heartbeat on c and reads its answer; it returns the
// heartbeat's send time, the anchor of the client's deadline.
func confirm(t *testing.T, c *batontest.Conn) time.Time {
	t.Helper()
	sent := time.Now()
	c.Heartbeat()
	if f := c.ReadFrame(5 * time.Second); f.Type != wire.TypeAcquired && f.Type != wire.TypeWaiting {
		t.Fatalf("heartbeat: got %v", f)
	}
	return sent
}

func others(procs []*clusterProc, not *clusterProc) []*clusterProc {
	var out []*clusterProc
	for _, p := range procs {
		if p != not {
			out = append(out, p)
		}
	}
	return out
}

// TestBinaryClusterV3SIGTERMKeepsClaims: SIGTERM of the leader tells its
// claims of version 3 NOT_LEADER naming its successor; on the successor
// every holder resumes with its token and every waiter keeps its place
// (whatever the order the resumes come in), and a holder's release hands
// over to the first waiter.
func TestBinaryClusterV3SIGTERMKeepsClaims(t *testing.T) {
	t.Parallel()
	procs := newClusterProcs(t)
	l := waitLeader(t, procs)
	waitGiving(t, l.addr)
	const lease = 10 * time.Second
	names := []string{"a", "b", "c"}
	type claim struct {
		conn *batontest.Conn
		cl   *batontest.Claim
	}
	holders := map[string]claim{}
	waiters := map[string][]claim{}
	for _, name := range names {
		c, cl := v3Claim(t, l.addr, name, lease, true, 0)
		holders[name] = claim{c, cl}
		for pos := uint32(1); pos <= 2; pos++ {
			c, cl := v3Claim(t, l.addr, name, lease, false, pos)
			waiters[name] = append(waiters[name], claim{c, cl})
		}
	}
	var all []claim
	for _, name := range names {
		all = append(append(all, holders[name]), waiters[name]...)
	}
	for _, c := range all {
		confirm(t, c.conn)
	}
	if err := l.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	hints := map[string]bool{}
	for _, c := range all {
		f := c.conn.ReadFrame(5 * time.Second)
		if f.Type != wire.TypeError || f.Err.Code != wire.CodeNotLeader {
			t.Fatalf("got %v, want NOT_LEADER naming the successor", f)
		}
		hints[f.Err.Msg] = true
		c.conn.Conn.Close()
	}
	if err := <-l.log.waited; err != nil {
		t.Fatalf("the leader after SIGTERM: %v, want exit 0", err)
	}
	l.log.waited <- nil
	s := waitLeader(t, others(procs, l))
	if len(hints) != 1 || !hints[s.addr] {
		t.Fatalf("NOT_LEADER named %v, the successor serves at %s", hints, s.addr)
	}
	if logged := l.log.drain(t); !strings.Contains(logged, `"listed":9`) {
		t.Errorf("the handing-over leader's log does not list 9 claims:\n%s", logged)
	}

	for _, name := range names {
		// The waiters come back last first: each takes its ticket's place.
		for i := len(waiters[name]) - 1; i >= 0; i-- {
			w := waiters[name][i]
			c, f := resumeAt(t, s.addr, w.cl)
			if f.Type != wire.TypeWaiting || f.Ticket != w.cl.ID {
				t.Fatalf("%s: waiter %d's resume: got %v, want WAITING with its ticket", name, i+1, f)
			}
			waiters[name][i].conn = c
		}
		h := holders[name]
		c, f := resumeAt(t, s.addr, h.cl)
		if f.Type != wire.TypeAcquired || f.Token != h.cl.ID {
			t.Fatalf("%s: the holder's resume: got %v, want ACQUIRED with its token %d", name, f, h.cl.ID)
		}
		holders[name] = claim{c, h.cl}
		for i, w := range waiters[name] {
			w.conn.Heartbeat()
			if f := w.conn.ReadFrame(5 * time.Second); f.Type != wire.TypeWaiting || f.Position != uint32(i+1) {
				t.Fatalf("%s: waiter %d after the handover: got %v, want WAITING %d", name, i+1, f, i+1)
			}
		}
	}
	holders["a"].conn.Conn.Close()
	if f := waiters["a"][0].conn.ReadFrame(5 * time.Second); f.Type != wire.TypeAcquired || !f.Push || f.Token <= holders["a"].cl.ID {
		t.Fatalf("a: the first waiter after the holder's release: got %v, want the push", f)
	}
}

// TestBinaryClusterV3Kill9: after kill -9 of the leader, a holder with a
// 10 s lease resumes on the new leader, with its token, before its own
// deadline (0.8 x lease after its last confirmed send); a holder with a
// 1 s lease, whose heartbeat was due when the leader died, cannot: its
// deadline passes before the new leader answers any resume (it is lost,
// and its client says so, as in version 2).
func TestBinaryClusterV3Kill9(t *testing.T) {
	t.Parallel()
	procs := newClusterProcs(t)
	l := waitLeader(t, procs)
	waitGiving(t, l.addr)
	long, lc := v3Claim(t, l.addr, "k10", 10*time.Second, true, 0)
	short, sc := v3Claim(t, l.addr, "k1", time.Second, true, 0)
	longSent, shortSent := confirm(t, long), confirm(t, short)
	// The fault comes when the short holder's next heartbeat is due (a
	// quarter lease after its last): the usual case, not its luckiest.
	time.Sleep(time.Second / 4)
	if err := l.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-l.log.waited
	l.log.waited <- nil
	for _, c := range []*batontest.Conn{long, short} {
		if f, err := c.TryReadFrame(5 * time.Second); err == nil {
			t.Fatalf("got %v after kill -9, want the end of the connection", f)
		}
		c.Conn.Close()
	}
	rest := others(procs, l)
	var n *clusterProc
	var f batontest.Frame
	for deadline := longSent.Add(8 * time.Second); ; {
		// The client's move: the other addresses, until one answers.
		for _, p := range rest {
			_, f = resumeAt(t, p.addr, lc)
			if f.Type == wire.TypeAcquired {
				n = p
				break
			}
		}
		if n != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	answered := time.Now()
	if n == nil || f.Token != lc.ID {
		t.Fatalf("the 10 s holder: last answer %v, want ACQUIRED with its token %d before its deadline", f, lc.ID)
	}
	if deadline := longSent.Add(8 * time.Second); answered.After(deadline) {
		t.Fatalf("the 10 s holder was answered %v after its deadline", answered.Sub(deadline))
	}
	t.Logf("kill -9 to the 10 s holder's resume answered: %v (its deadline left %v)",
		answered.Sub(killed).Round(time.Millisecond), longSent.Add(8*time.Second).Sub(answered).Round(time.Millisecond))
	if shortDeadline := shortSent.Add(800 * time.Millisecond); answered.Before(shortDeadline) {
		t.Fatalf("a resume was answered %v after the kill, within the 1 s holder's deadline: the failover is faster than this test assumes", answered.Sub(killed))
	}
	_ = sc
}
