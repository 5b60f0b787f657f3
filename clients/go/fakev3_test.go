package baton

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// fakeCluster is a Baton server of protocol version 3 for the client's
// tests, written from docs/protocol.md section 14 and checked against the
// conversations of the shared vectors (TestFakeServerPlaysTheVectors): a
// lock table shared by the nodes of a pretend cluster, of which one, the
// leader, serves; credentials made with wire.Minter; claims moved only to
// a higher attempt number, the connection left told MOVED. What a real
// server's timing adds (leases that expire, graces, generations every R)
// it leaves out: a test drives those moments itself (handover, crash,
// freeze, newGeneration). It serves connections from a pipeNet (inside
// synctest) or from TCP listeners.
//
// It never writes under its lock: each connection has a writer goroutine
// fed by a queue, so that a client blocked on one pipe cannot hold the
// table.
type fakeCluster struct {
	t         *testing.T
	minter    *wire.Minter
	clusterID string

	mu       sync.Mutex
	leader   string
	old      map[string]bool // nodes that speak versions 1 and 2 only
	thaw     chan struct{}   // non-nil while the leader is frozen: closed to thaw it
	gen      uint32
	epoch    uint64
	seq      uint64
	names    map[string]*fakeName
	byID     map[uint64]*fakeClaim // every live or pending claim, by its ticket and its token
	conns    map[*fakeConn]bool
	resumes  []fakeResume // every resume read, in order
	accepted map[string]int
}

// fakeResume is one resume a node read: for the tests' questions.
type fakeResume struct {
	node    string
	attempt uint16
	held    bool
	answer  string // the answer's type or code
}

type fakeName struct {
	holders []*fakeClaim
	queue   []*fakeClaim // in ticket order
}

type fakeClaim struct {
	name    string
	version uint8
	shared  bool
	limit   uint16 // 1 for an exclusive claim
	leaseMs uint32
	ticket  uint64
	token   uint64 // 0 while it waits
	cred    bool   // it was given a credential
	sentGen uint32 // the generation of the credential it was given last
	conn    *fakeConn
	attempt uint16
}

type fakeConn struct {
	f     *fakeCluster
	node  string
	nc    net.Conn
	reset func() // ends the connection with a reset: the client reads ECONNRESET
	die   func() // ends it as a process that dies: a FIN (over TLS, no close_notify)
	out   chan fakeOut
	claim *fakeClaim // the claim whose connection this is; nil once it left
}

type fakeOut struct {
	b   []byte
	end int // 0: more may follow; endClose: close after; endReset: reset after
}

const (
	endClose = 1
	endReset = 2
	endDie   = 3
)

// fakeKey is the vectors' test key, bytes 0 to 31.
func fakeKey() []byte {
	k := make([]byte, wire.KeySize)
	for i := range k {
		k[i] = byte(i)
	}
	return k
}

// newFakeCluster makes a pretend cluster whose leader is leader.
func newFakeCluster(t *testing.T, leader string) *fakeCluster {
	t.Helper()
	m, err := wire.NewMinter(fakeKey())
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeCluster{t: t, minter: m, clusterID: "0123456789abcdef", leader: leader, gen: 1, epoch: 3,
		old: map[string]bool{}, names: map[string]*fakeName{}, byID: map[uint64]*fakeClaim{},
		conns: map[*fakeConn]bool{}, accepted: map[string]int{}}
	t.Cleanup(f.closeAll)
	return f
}

// onPipes makes pn's dials connections to f, each node an address.
func (f *fakeCluster) onPipes(pn *pipeNet) {
	pn.server = func(addr string, c net.Conn, reset func()) { f.serve(addr, c, reset, func() { c.Close() }) }
}

// listen serves node on a TCP listener of 127.0.0.1:0, over TLS with
// cfg unless it is nil, and returns its address, which is the node's
// name.
func (f *fakeCluster) listen(t *testing.T, cfg ...*tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*net.TCPConn)
			reset := func() { tc.SetLinger(0); tc.Close() }
			die := func() { tc.Close() }
			if len(cfg) > 0 && cfg[0] != nil {
				c = tls.Server(c, cfg[0])
			}
			go f.serve(ln.Addr().String(), c, reset, die)
		}
	}()
	return ln.Addr().String()
}

func (f *fakeCluster) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for fc := range f.conns {
		fc.nc.Close()
	}
}

func (f *fakeCluster) nextID() uint64 {
	f.seq++
	return f.epoch<<40 | f.seq
}

// serve is one connection to node: the first frame, then heartbeats.
func (f *fakeCluster) serve(node string, nc net.Conn, reset, die func()) {
	fc := &fakeConn{f: f, node: node, nc: nc, reset: reset, die: die, out: make(chan fakeOut, 64)}
	f.mu.Lock()
	f.conns[fc] = true
	f.accepted[node]++
	f.mu.Unlock()
	go fc.writer(fc.out)
	defer fc.gone()
	for first := true; ; first = false {
		typ, p, err := readFakeFrame(nc)
		if err != nil {
			return
		}
		f.mu.Lock()
		for f.thaw != nil && node == f.leader {
			thaw := f.thaw
			f.mu.Unlock()
			<-thaw // frozen: the frame is answered late
			f.mu.Lock()
		}
		switch {
		case first && typ == wire.TypeAcquire:
			f.acquire(fc, p)
		case !first && typ == wire.TypeHeartbeat && fc.claim != nil:
			f.heartbeat(fc)
		default:
			fc.fail(wire.CodeProtocol, "unexpected frame")
		}
		f.mu.Unlock()
	}
}

func readFakeFrame(r io.Reader) (wire.Type, []byte, error) {
	var h [wire.HeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	hdr, err := wire.ParseHeader(h[:])
	if err != nil {
		return 0, nil, err
	}
	p := make([]byte, hdr.Length)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, err
	}
	return hdr.Type, p, nil
}

func (fc *fakeConn) writer(out <-chan fakeOut) {
	for o := range out {
		fc.nc.Write(o.b)
		switch o.end {
		case endClose:
			fc.nc.Close()
			return
		case endReset:
			fc.reset()
			return
		case endDie:
			fc.die()
			return
		}
	}
}

// send queues b. f.mu must be held.
func (fc *fakeConn) send(b []byte, end int) {
	if fc.out == nil {
		return // ended already
	}
	fc.out <- fakeOut{b, end}
	if end != 0 {
		close(fc.out)
		fc.out = nil
	}
}

// fail sends an ERROR and ends the connection, and the claim on it if it
// has one. f.mu must be held.
func (fc *fakeConn) fail(code wire.Code, msg string) {
	if c := fc.claim; c != nil && c.conn == fc {
		fc.f.end(c)
	}
	fc.claim = nil
	fc.send(wire.AppendError(nil, code, msg), endClose)
}

// gone is the end of the connection's reading: the client closed it (or
// reset it), which is a release of the claim it carries.
func (fc *fakeConn) gone() {
	f := fc.f
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, fc)
	if c := fc.claim; c != nil && c.conn == fc {
		f.end(c)
	}
	fc.claim = nil
	fc.send(nil, endClose)
}

// end removes c from the table and moves its name's queue. f.mu must be
// held.
func (f *fakeCluster) end(c *fakeClaim) {
	n := f.names[c.name]
	n.holders = slices.DeleteFunc(n.holders, func(x *fakeClaim) bool { return x == c })
	n.queue = slices.DeleteFunc(n.queue, func(x *fakeClaim) bool { return x == c })
	delete(f.byID, c.ticket)
	delete(f.byID, c.token)
	c.conn = nil
	f.promote(c.name)
}

// mayHold reports whether c may hold the name now. f.mu must be held.
func (f *fakeCluster) mayHold(n *fakeName, c *fakeClaim) bool {
	if !c.shared {
		return len(n.holders) == 0
	}
	for _, h := range n.holders {
		if !h.shared {
			return false
		}
	}
	return len(n.holders) < int(c.limit)
}

// promote grants the heads of the name's queue that may hold, in order;
// a pending waiter (no connection) is never granted, and holds up those
// behind it. f.mu must be held.
func (f *fakeCluster) promote(name string) {
	n := f.names[name]
	for len(n.queue) > 0 {
		head := n.queue[0]
		if head.conn == nil || !f.mayHold(n, head) {
			return
		}
		n.queue = n.queue[1:]
		head.token = f.nextID()
		f.byID[head.token] = head
		n.holders = append(n.holders, head)
		head.conn.send(f.acquiredFrame(head, true, true), 0)
	}
}

// acquiredFrame is c's ACQUIRED: with its credential when it has one and
// withCred. f.mu must be held.
func (f *fakeCluster) acquiredFrame(c *fakeClaim, push, withCred bool) []byte {
	a := wire.Acquired{Push: push, Token: c.token}
	if c.cred && withCred {
		a.WithCredential, a.Generation, a.Credential = true, f.gen, f.credential(c, wire.RoleHolder, f.gen)
		c.sentGen = f.gen
	}
	return wire.AppendAcquiredV3(nil, a)
}

// waitingFrame is c's WAITING, with its ticket when it has a credential
// and withCred. f.mu must be held.
func (f *fakeCluster) waitingFrame(c *fakeClaim, withCred bool) []byte {
	w := wire.Waiting{Position: uint32(slices.Index(f.names[c.name].queue, c) + 1)}
	if c.cred && withCred {
		w.WithTicket, w.Ticket, w.Generation, w.Credential = true, c.ticket, f.gen, f.credential(c, wire.RoleWaiter, f.gen)
		c.sentGen = f.gen
	}
	return wire.AppendWaitingV3(nil, w)
}

func (f *fakeCluster) credential(c *fakeClaim, role wire.Role, gen uint32) wire.Credential {
	id := c.token
	if role == wire.RoleWaiter {
		id = c.ticket
	}
	return f.minter.Credential(wire.Claim{Role: role, ClusterID: f.clusterID, Generation: gen, Shared: c.shared,
		Limit: c.limit, LeaseMs: c.leaseMs, ID: id, Name: c.name})
}

// acquire answers the first frame of a connection. f.mu must be held.
func (f *fakeCluster) acquire(fc *fakeConn, p []byte) {
	newest := uint8(wire.Version3)
	if f.old[fc.node] {
		newest = wire.Version2
	}
	a, err := wire.DecodeAcquireUpTo(p, newest)
	if err != nil {
		var we *wire.Error
		errors.As(err, &we)
		fc.fail(we.Code, we.Msg)
		return
	}
	if fc.node != f.leader {
		fc.fail(wire.CodeNotLeader, f.leader) // without looking at the credential
		return
	}
	if a.Resuming() {
		f.resume(fc, a)
		return
	}
	n := f.names[a.Name]
	if n == nil {
		n = &fakeName{}
		f.names[a.Name] = n
	}
	c := &fakeClaim{name: a.Name, version: a.Version, shared: a.Shared(), limit: max(a.Limit, 1), leaseMs: a.LeaseMs,
		cred: a.Version == wire.Version3, conn: fc}
	for _, o := range slices.Concat(n.holders, n.queue) {
		if o.shared && c.shared && o.limit != c.limit {
			fc.fail(wire.CodeLimitMismatch, fmt.Sprint(o.limit))
			return
		}
	}
	free := len(n.queue) == 0 && f.mayHold(n, c)
	if a.NoWait() && !free {
		fc.fail(wire.CodeBusy, "")
		return
	}
	c.ticket = f.nextID()
	f.byID[c.ticket] = c
	fc.claim = c
	if free {
		c.token = f.nextID()
		f.byID[c.token] = c
		n.holders = append(n.holders, c)
		fc.send(f.acquiredFrame(c, false, true), 0)
		return
	}
	n.queue = append(n.queue, c)
	fc.send(f.waitingFrame(c, true), 0)
}

// heartbeat answers a heartbeat: the claim's state, with a fresh
// credential after a new generation. f.mu must be held.
func (f *fakeCluster) heartbeat(fc *fakeConn) {
	c := fc.claim
	fresh := c.cred && c.sentGen != f.gen
	if c.token != 0 {
		fc.send(f.acquiredFrame(c, false, fresh), 0)
		return
	}
	fc.send(f.waitingFrame(c, fresh), 0)
}

// resume answers a resume (section 14, "What the server answers to a
// resume"). f.mu must be held.
func (f *fakeCluster) resume(fc *fakeConn, a wire.Acquire) {
	r := fakeResume{node: fc.node, attempt: a.Resume.Attempt, held: a.Held()}
	answer := func(s string) { r.answer = s; f.resumes = append(f.resumes, r) }
	role := wire.RoleWaiter
	if a.Held() {
		role = wire.RoleHolder
	}
	want := wire.Claim{Role: role, ClusterID: f.clusterID, Generation: a.Resume.Generation, Shared: a.Shared(),
		Limit: a.Limit, LeaseMs: a.LeaseMs, ID: a.Resume.ID, Name: a.Name}
	if !f.minter.Verify(want, a.Resume.Credential) {
		answer("BAD_CREDENTIAL")
		fc.fail(wire.CodeBadCredential, "")
		return
	}
	if a.Resume.Generation+1 < f.gen {
		answer("RESUME_REFUSED")
		fc.fail(wire.CodeResumeRefused, "generation too old")
		return
	}
	c := f.byID[a.Resume.ID]
	if c == nil || (a.Held() && c.token != a.Resume.ID) {
		answer("RESUME_REFUSED")
		fc.fail(wire.CodeResumeRefused, "claim ended")
		return
	}
	if a.Resume.Attempt <= c.attempt {
		answer("MOVED")
		fc.fail(wire.CodeMoved, "")
		return
	}
	// A move: one step under the lock; the connection left is told MOVED,
	// and its end releases nothing.
	old := c.conn
	c.conn, c.attempt, fc.claim = fc, a.Resume.Attempt, c
	if old != nil {
		old.fail(wire.CodeMoved, "")
	}
	if c.token != 0 {
		answer("ACQUIRED")
		fc.send(f.acquiredFrame(c, false, true), 0)
		return
	}
	answer("WAITING")
	fc.send(f.waitingFrame(c, true), 0)
	f.promote(c.name) // a pending waiter that came back may be the head
}

// tell ends every connection of the leader: the claims of version 3 with
// a credential are kept, pending, and their connections told code with
// msg (or, with eof, nothing: the end of the stream); the others are told
// SHUTDOWN (nothing, with eof) and end.
func (f *fakeCluster) tell(code wire.Code, msg string, eof bool) {
	var ended []*fakeClaim
	for fc := range f.conns {
		if fc.node != f.leader {
			continue
		}
		c := fc.claim
		kept := c != nil && c.cred && c.conn == fc
		switch {
		case kept:
			c.conn = nil
		case c != nil && c.conn == fc:
			ended = append(ended, c)
		}
		fc.claim = nil
		switch {
		case eof:
			fc.send(nil, endDie)
		case kept:
			fc.send(wire.AppendError(nil, code, msg), endClose)
		default:
			fc.send(wire.AppendError(nil, wire.CodeShutdown, "bye"), endClose)
		}
	}
	for _, c := range ended {
		f.end(c)
	}
}

// handover is a planned handover of the leader to node to: the claims of
// version 3 are told NOT_LEADER naming to and wait there, pending; the
// others are told SHUTDOWN.
func (f *fakeCluster) handover(to string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tell(wire.CodeNotLeader, to, false)
	f.leader = to
}

// shutdown is a standalone server's planned stop: SHUTDOWN to every
// session; the claims of version 3 wait for its next start, pending.
func (f *fakeCluster) shutdown() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tell(wire.CodeShutdown, "bye", false)
}

// crash is the leader's process dying: every connection of it ends with
// no ERROR. Its successor takes back the claims of version 3 in its
// grace (here: they stay, pending); to is the new leader ("" for the
// same node, restarted).
func (f *fakeCluster) crash(to string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tell(0, "", true)
	if to != "" {
		f.leader = to
	}
}

// freeze makes the leader answer nothing until thaw: its frames are
// answered late, in order, when it thaws.
func (f *fakeCluster) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.thaw == nil {
		f.thaw = make(chan struct{})
	}
}

func (f *fakeCluster) unfreeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.thaw != nil {
		close(f.thaw)
		f.thaw = nil
	}
}

// resetHolder resets the connection of the claim that holds name first:
// a reset by a middlebox reaches both ends, and the server takes it for
// the client's release.
func (f *fakeCluster) resetHolder(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.names[name]
	if n == nil || len(n.holders) == 0 || n.holders[0].conn == nil {
		f.t.Fatalf("no connected holder of %q to reset", name)
	}
	c := n.holders[0]
	fc := c.conn
	fc.claim = nil
	f.end(c)
	fc.send(nil, endReset)
}

// newGeneration starts the next generation of credentials.
func (f *fakeCluster) newGeneration() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
}

// setLeader makes node the leader, without telling anyone.
func (f *fakeCluster) setLeader(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leader = node
}

// setOld makes node one of an older version: it answers VERSION to 3.
func (f *fakeCluster) setOld(node string, old bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.old[node] = old
}

// holders returns the tokens that hold name, and whether each has a
// connection (false: pending).
func (f *fakeCluster) holders(name string) (tokens []uint64, connected []bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := f.names[name]; n != nil {
		for _, h := range n.holders {
			tokens = append(tokens, h.token)
			connected = append(connected, h.conn != nil)
		}
	}
	return tokens, connected
}

// queued returns the tickets that wait for name, in order.
func (f *fakeCluster) queued(name string) []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []uint64
	if n := f.names[name]; n != nil {
		for _, c := range n.queue {
			out = append(out, c.ticket)
		}
	}
	return out
}

// resumesSeen returns the resumes read so far.
func (f *fakeCluster) resumesSeen() []fakeResume {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.resumes)
}

// connsOpen counts the connections of node still open on the server's
// side.
func (f *fakeCluster) connsOpen(node string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for fc := range f.conns {
		if fc.node == node {
			n++
		}
	}
	return n
}

// wait polls cond for up to a minute of (fake or real) time.
func (f *fakeCluster) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within a minute: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
