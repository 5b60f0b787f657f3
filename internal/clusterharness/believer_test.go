package clusterharness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// A believer is a raw wire client that holds a lock for many seconds and
// knows, from its own send times, exactly how long it may believe it holds
// it (docs/protocol.md, "The heartbeat schedule"): until 0.8 × lease after
// the send time of the latest frame whose reply has arrived, or until it
// sees the loss (an ERROR, the close), whichever comes first. A reply that
// arrives after that moment confirms nothing. Its hold in the checker is
// exactly that interval, so the checker sees what a correct client of any
// language would believe, not when a goroutine happened to run.
//
// The Go client's loops cannot be paused in mid-belief by the harness; a
// believer's link can: cut (nothing either way, as when its network goes
// down with its node), or deaf (its frames go out; of the node's, only
// WAITING and ACQUIRED arrive, an ERROR and the close are lost, as behind
// a middlebox that drops them). The link is modelled at the believer's
// socket: what the node sees is the same as with a real cut.

// linkState is what the network between a believer and its node lets through.
type linkState int32

const (
	linkUp linkState = iota
	// linkCut: nothing either way.
	linkCut
	// linkDeaf: the believer's frames go out; an ERROR and the close of
	// the node do not arrive, WAITING and ACQUIRED do.
	linkDeaf
)

// beatMode is when a believer sends its heartbeats.
type beatMode int

const (
	// beatAfterReply: lease/4 after the reply to the last one, one in
	// flight, as the Go client does.
	beatAfterReply beatMode = iota
	// beatPipelined: every lease/4 whether or not the last one was
	// answered. The protocol asks clients for one in flight; the server
	// answers each, and the belief rule holds for any number in flight. A
	// pipelining believer has heartbeats queued at a paused node.
	beatPipelined
	// beatManual: only when the scenario asks (bsession.beat), as a
	// client whose own timer fires late (it was slow or paused itself).
	beatManual
)

// believer is one client of the long workload: it takes name with lease
// on the leader, holds it for a random time in [holdMin, holdMax] while
// writing the register every every, closes, and takes it again, until the
// workload stops. A shared believer (limit > 0) makes shared claims of
// protocol version 2 with limit, and writes the slot counter instead.
type believer struct {
	w                *workload
	ctx              context.Context // ends its loop and session; nil: the workload's
	id               int
	name             string
	lease            time.Duration
	limit            uint16 // 0: an exclusive claim (version 1)
	beats            beatMode
	every            time.Duration
	holdMin, holdMax time.Duration

	told map[wire.Code]bool // client errors recorded (its loop's goroutine only)

	mu  sync.Mutex
	cur *bsession // nil between sessions
}

// bsession is one connection of a believer.
type bsession struct {
	node    int // the node it is connected to (1-based)
	link    atomic.Int32
	held    atomic.Bool
	replies atomic.Uint64 // replies that confirmed a send
	beatNow chan struct{} // a heartbeat at once
	done    chan struct{} // closed when the session's belief is over
	hold    *hold         // set once granted; read after done
}

func newBelieverSession(node int) *bsession {
	return &bsession{node: node, beatNow: make(chan struct{}, 1), done: make(chan struct{})}
}

// setLink changes what the session's network lets through from now on.
func (s *bsession) setLink(l linkState) { s.link.Store(int32(l)) }

// beat asks for a heartbeat at once.
func (s *bsession) beat() {
	select {
	case s.beatNow <- struct{}{}:
	default:
	}
}

// current is the believer's session if it holds its lock on node (0: any
// node) over a link that is up, else nil (one cut off by an earlier fault
// is not hit again).
func (b *believer) current(node int) *bsession {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.cur; s != nil && s.held.Load() && linkState(s.link.Load()) == linkUp && (node == 0 || s.node == node) {
		return s
	}
	return nil
}

// run takes the lock again and again on the nodes at addrs, following
// NOT_LEADER hints, until the workload stops.
func (b *believer) run(addrs []string) {
	rng := rand.New(rand.NewPCG(uint64(b.id), uint64(time.Now().UnixNano())))
	next, hint := rng.IntN(len(addrs)), ""
	for b.context().Err() == nil {
		addr := hint
		if addr == "" {
			addr = addrs[next%len(addrs)]
			next++
		}
		node := indexOf(addrs, addr) + 1
		if node == 0 {
			hint = "" // a hint outside the list is not followed (docs/protocol.md)
			continue
		}
		hold := b.holdMin + time.Duration(rng.Int64N(int64(b.holdMax-b.holdMin)+1))
		s := newBelieverSession(node)
		var held bool
		hint, held = b.session(addr, s, hold)
		switch {
		case held:
		case hint != "": // a short pause: hints go stale while a leader changes
			idle(b.context(), time.Duration(5+rng.IntN(10))*time.Millisecond)
		default:
			idle(b.context(), time.Duration(20+rng.IntN(60))*time.Millisecond)
		}
	}
}

func (b *believer) context() context.Context {
	if b.ctx != nil {
		return b.ctx
	}
	return b.w.ctx
}

// believerGroup is believers started and stopped together.
type believerGroup struct {
	bs     []*believer
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// believerSpec is some believers of a group: perName on each of names with
// lease, each holding for holdMin to holdMax at a time, with ids from
// firstID; with limit > 0, shared claims with that limit.
type believerSpec struct {
	names                   []string
	perName                 int
	lease, holdMin, holdMax time.Duration
	firstID                 int
	limit                   uint16
}

// believers starts the believers of specs on the nodes at addrs, as one
// group.
func (w *workload) believers(addrs []string, specs ...believerSpec) *believerGroup {
	ctx, cancel := context.WithCancel(w.ctx)
	g := &believerGroup{cancel: cancel}
	for _, sp := range specs {
		id := sp.firstID
		for _, name := range sp.names {
			for range sp.perName {
				b := &believer{w: w, ctx: ctx, id: id, name: name, lease: sp.lease, limit: sp.limit,
					every: min(sp.lease/10, 100*time.Millisecond), holdMin: sp.holdMin, holdMax: sp.holdMax}
				id++
				g.bs = append(g.bs, b)
				w.wg.Add(1)
				g.wg.Add(1)
				go func() {
					defer w.wg.Done()
					defer g.wg.Done()
					b.run(addrs)
				}()
			}
		}
	}
	return g
}

// names is every name of the group's believers, once each.
func (g *believerGroup) names() []string {
	var ns []string
	for _, b := range g.bs {
		if !slices.Contains(ns, b.name) {
			ns = append(ns, b.name)
		}
	}
	return ns
}

// stop ends the group's believers (each closes, ending its hold) and
// waits for them.
func (g *believerGroup) stop() {
	g.cancel()
	g.wg.Wait()
}

// holdingOn lists the sessions of the group's believers that hold their
// lock on node i (0: any node).
func (g *believerGroup) holdingOn(i int) []*bsession {
	var ss []*bsession
	for _, b := range g.bs {
		if s := b.current(i); s != nil {
			ss = append(ss, s)
		}
	}
	return ss
}

// holds reports whether one of the group's believers of name holds it.
func (g *believerGroup) holds(name string) bool {
	for _, b := range g.bs {
		if b.name == name && b.current(0) != nil {
			return true
		}
	}
	return false
}

func indexOf(addrs []string, a string) int {
	for i, x := range addrs {
		if x == a {
			return i
		}
	}
	return -1
}

// frameEvent is one frame from the node as the believer received it, or
// the connection's end (err set).
type frameEvent struct {
	at    time.Time
	typ   wire.Type
	push  bool
	token uint64
	werr  *wire.Error
	err   error // the read failed: the connection ended
}

// session runs one connection: ACQUIRE, heartbeats, the hold, the end. It
// returns NOT_LEADER's hint (if any) and whether the lock was held.
func (b *believer) session(addr string, s *bsession, holdFor time.Duration) (hint string, held bool) {
	b.mu.Lock()
	b.cur = s
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.cur = nil
		b.mu.Unlock()
		close(s.done)
	}()
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", false
	}
	events := make(chan frameEvent, 16)
	quit, readerDone := make(chan struct{}), make(chan struct{})
	go func() { // ends when nc is closed (below) or the node closes it
		defer close(readerDone)
		b.read(nc, s, events, quit)
	}()
	defer func() { close(quit); nc.Close(); <-readerDone }()

	timeout := b.lease * 4 / 5
	var (
		pending  []time.Time // send times of the frames not yet answered, in order
		deadline time.Time   // the belief (or the wait) ends here unless a reply confirms a later send
		h        *hold
	)
	send := func(frame []byte) bool {
		if linkState(s.link.Load()) == linkCut {
			return true // lost on the way: no reply will come
		}
		at := time.Now()
		nc.SetWriteDeadline(at.Add(time.Second))
		if _, err := nc.Write(frame); err != nil {
			// Behind a deaf link the node's close never arrives: a
			// write that fails on it is lost like any other frame.
			return linkState(s.link.Load()) == linkDeaf
		}
		pending = append(pending, at)
		return true
	}
	claim := wire.Acquire{Version: wire.Version, LeaseMs: uint32(b.lease / time.Millisecond),
		Name: b.name, Owner: fmt.Sprintf("believer-%d", b.id)}
	if b.limit > 0 {
		claim.Version, claim.Flags, claim.Limit = wire.Version2, wire.FlagShared, b.limit
	}
	acq, err := wire.AppendAcquire(nil, claim)
	if err != nil {
		panic(err) // the harness's own constant frame
	}
	deadline = time.Now().Add(timeout)
	if !send(acq) {
		return "", false
	}
	var asked time.Time
	if len(pending) > 0 {
		asked = pending[0]
	}
	beatEvery := b.lease / 4
	beat := time.NewTimer(beatEvery)
	defer beat.Stop()
	if b.beats != beatPipelined {
		beat.Stop() // armed by the first reply, if ever
	}
	expire := time.NewTimer(time.Until(deadline))
	defer expire.Stop()
	work := time.NewTimer(time.Hour)
	work.Stop()
	defer work.Stop()
	write := time.NewTicker(b.every)
	defer write.Stop()

	// end closes the hold at the end of its belief.
	end := func(at time.Time, why error) {
		if h == nil {
			return
		}
		if deadline.Before(at) {
			at, why = deadline, errUnconfirmed
		}
		b.w.mu.Lock()
		h.ended, h.lost = at, why
		b.w.mu.Unlock()
		s.hold = h
		if h.shared {
			b.w.slots.leave(h.name, h.token, h.client)
		}
	}
	for {
		select {
		case <-b.context().Done():
			end(time.Now(), nil)
			return "", h != nil
		case <-work.C:
			if linkState(s.link.Load()) != linkUp {
				// Cut off by a fault, it works on while it believes:
				// the grace must cover exactly such a holder.
				continue
			}
			end(time.Now(), nil) // the close is the release
			return "", true
		case <-expire.C:
			end(deadline, errUnconfirmed)
			return "", h != nil
		case <-s.beatNow:
			if !send(wire.AppendHeartbeat(nil)) {
				end(time.Now(), errors.New("heartbeat write failed"))
				return "", h != nil
			}
		case <-beat.C:
			if !send(wire.AppendHeartbeat(nil)) {
				end(time.Now(), errors.New("heartbeat write failed"))
				return "", h != nil
			}
			if b.beats == beatPipelined {
				beat.Reset(beatEvery)
			}
		case at := <-write.C:
			if h != nil && at.Before(deadline) {
				b.writeResource(h)
			}
		case ev := <-events:
			if ev.err != nil || ev.typ == wire.TypeError {
				why := ev.err
				if ev.werr != nil {
					why = ev.werr
					switch ev.werr.Code {
					case wire.CodeNotLeader:
						hint = ev.werr.Msg
					case wire.CodeLimitMismatch, wire.CodeBadRequest, wire.CodeProtocol, wire.CodeVersion:
						// Every believer of a name sends the same valid
						// claim: a client error is the server's fault.
						b.refused(ev)
					}
				}
				end(ev.at, why)
				return hint, h != nil
			}
			if !ev.at.Before(deadline) {
				end(deadline, errUnconfirmed) // too late: it confirms nothing
				return "", h != nil
			}
			if !(ev.typ == wire.TypeAcquired && ev.push) {
				// A reply: it confirms the session as of its request's send.
				if len(pending) == 0 {
					end(ev.at, errors.New("a reply with no request outstanding"))
					return "", h != nil
				}
				deadline = pending[0].Add(timeout)
				pending = pending[1:]
				s.replies.Add(1)
				expire.Reset(time.Until(deadline))
				if b.beats == beatAfterReply && len(pending) == 0 {
					beat.Reset(beatEvery)
				}
			}
			if ev.typ == wire.TypeAcquired && h == nil {
				h = &hold{client: 1000 + b.id, name: b.name, token: ev.token, granted: ev.at,
					shared: b.limit > 0, limit: int(b.limit), asked: asked}
				if h.shared {
					b.w.slots.enter(h.name, h.token, h.client)
				} else if seen := b.w.reg.read(b.name); seen > h.token {
					h.readAbove = seen
				}
				b.w.mu.Lock()
				b.w.holds = append(b.w.holds, h)
				b.w.mu.Unlock()
				s.held.Store(true)
				b.writeResource(h)
				work.Reset(holdFor)
			}
		}
	}
}

// refused records a client error the believer was told, the first of
// each code (it asks again and again).
func (b *believer) refused(ev frameEvent) {
	if b.told[ev.werr.Code] {
		return
	}
	if b.told == nil {
		b.told = map[wire.Code]bool{}
	}
	b.told[ev.werr.Code] = true
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	b.w.bad = append(b.w.bad, fmt.Sprintf("lock %q: believer %d (limit %d) was told %v at %s (the first time)",
		b.name, b.id, b.limit, ev.werr, ev.at.Format("15:04:05.000")))
}

// writeResource is one write of h's holder to the resource it guards:
// the slot counter for a shared claim, the register for an exclusive one.
func (b *believer) writeResource(h *hold) {
	if h.shared {
		b.w.slots.write(h.name, h.token, h.client)
		return
	}
	b.w.reg.write(h.name, h.token)
}

// read delivers the node's frames to events as the link lets them through.
func (b *believer) read(nc net.Conn, s *bsession, events chan<- frameEvent, quit <-chan struct{}) {
	var buf [wire.MaxFrame]byte
	for {
		ev := readEvent(nc, &buf)
		switch linkState(s.link.Load()) {
		case linkCut:
			if ev.err != nil {
				return
			}
			continue
		case linkDeaf:
			if ev.err != nil {
				return
			}
			if ev.typ == wire.TypeError {
				continue
			}
		}
		select {
		case events <- ev:
		case <-quit:
			return
		}
		if ev.err != nil {
			return
		}
	}
}

// errUnconfirmed ends a belief at its deadline: 0.8 × lease after the
// send of the latest frame whose reply arrived.
var errUnconfirmed = errors.New("unconfirmed for 0.8 × lease")

// readEvent reads one frame of the node.
func readEvent(r io.Reader, buf *[wire.MaxFrame]byte) frameEvent {
	if _, err := io.ReadFull(r, buf[:wire.HeaderSize]); err != nil {
		return frameEvent{at: time.Now(), err: err}
	}
	h, err := wire.ParseHeader(buf[:wire.HeaderSize])
	if err != nil {
		return frameEvent{at: time.Now(), err: err}
	}
	p := buf[wire.HeaderSize : wire.HeaderSize+int(h.Length)]
	if _, err := io.ReadFull(r, p); err != nil {
		return frameEvent{at: time.Now(), err: err}
	}
	ev := frameEvent{at: time.Now(), typ: h.Type}
	switch h.Type {
	case wire.TypeWaiting:
		_, err = wire.DecodeWaiting(p)
	case wire.TypeAcquired:
		ev.push, ev.token, err = wire.DecodeAcquired(p)
	case wire.TypeError:
		ev.werr, err = wire.DecodeError(p)
	default:
		err = fmt.Errorf("unexpected frame type %v", h.Type)
	}
	if err != nil {
		return frameEvent{at: ev.at, err: err}
	}
	return ev
}
