package baton

import (
	"context"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// The scripted server's side of version 3 (pipe_test.go has the rest).

// testCred is the credential the scripted servers give: 16 bytes the
// client must carry back unchanged and never print.
var testCred = wire.Credential{0xc0, 0xff, 0xee, 0x15, 0x5e, 0xc2, 0xe7, 0x00, 0x0d, 0xde, 0xad, 0xbe, 0xef, 0x42, 0x17, 0x99}

// testCred2 is the credential of the next generation.
var testCred2 = wire.Credential{0xfa, 0xce, 0xb0, 0x0c, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc}

func (p *peer) acquiredV3(t *testing.T, token uint64, gen uint32, cred wire.Credential) {
	t.Helper()
	p.send(t, wire.AppendAcquiredV3(nil, wire.Acquired{Token: token, WithCredential: true, Generation: gen, Credential: cred}))
}

func (p *peer) pushV3(t *testing.T, token uint64, gen uint32, cred wire.Credential) {
	t.Helper()
	p.send(t, wire.AppendAcquiredV3(nil, wire.Acquired{Push: true, Token: token, WithCredential: true, Generation: gen, Credential: cred}))
}

func (p *peer) waitingV3(t *testing.T, pos uint32, ticket uint64, gen uint32, cred wire.Credential) {
	t.Helper()
	p.send(t, wire.AppendWaitingV3(nil, wire.Waiting{Position: pos, WithTicket: true, Ticket: ticket, Generation: gen, Credential: cred}))
}

// acquire reads the connection's ACQUIRE, decoded (versions 1 to 3).
func (p *peer) acquire(t *testing.T) (wire.Acquire, rx) {
	t.Helper()
	f := p.next(t, wire.TypeAcquire)
	a, err := wire.DecodeAcquireUpTo(f.payload, wire.Version3)
	if err != nil {
		t.Fatalf("ACQUIRE from the client: %v", err)
	}
	return a, f
}

// resume reads the connection's first frame, which must be a resume of
// the claim on token (held) or ticket with generation gen and cred.
func (p *peer) resume(t *testing.T, held bool, id uint64, gen uint32, cred wire.Credential) (wire.Acquire, rx) {
	t.Helper()
	a, f := p.acquire(t)
	if !a.Resuming() || a.Held() != held || a.Resume.ID != id || a.Resume.Generation != gen || !a.Resume.Credential.Equal(cred) {
		t.Fatalf("first frame to %s: resuming %v, held %v, id %#x, generation %d, credential equal %v; want a resume, held %v, id %#x, generation %d, the claim's credential",
			p.addr, a.Resuming(), a.Held(), a.Resume.ID, a.Resume.Generation, a.Resume.Credential.Equal(cred), held, id, gen)
	}
	return a, f
}

// holdV3 runs the start of a claim of version 3 on "jobs": its ACQUIRE
// answered ACQUIRED with credential cred of generation 1.
func holdV3(t *testing.T, c *Client, pn *pipeNet, token uint64, opts ...Option) (*Lock, *peer) {
	t.Helper()
	ch := goAcquire(context.Background(), c, "jobs", opts...)
	p := pn.accept(t)
	if a, _ := p.acquire(t); a.Version != wire.Version3 {
		t.Fatalf("ACQUIRE of version %d, want 3", a.Version)
	}
	p.acquiredV3(t, token, 1, testCred)
	r := result(t, ch)
	if r.err != nil {
		t.Fatalf("Acquire: %v", r.err)
	}
	t.Cleanup(func() { r.l.Release() })
	return r.l, p
}

// waitV3 starts a claim of version 3 on "jobs" that waits: its ACQUIRE
// answered WAITING with ticket and cred of generation 1.
func waitV3(t *testing.T, c *Client, pn *pipeNet, ticket uint64, opts ...Option) (<-chan acquireResult, *peer) {
	t.Helper()
	ch := goAcquire(context.Background(), c, "jobs", opts...)
	p := pn.accept(t)
	p.acquire(t)
	p.waitingV3(t, 2, ticket, 1, testCred)
	return ch, p
}

// acceptWithin returns the next connection the client made, failing if it
// takes longer than d of fake time.
func (pn *pipeNet) acceptWithin(t *testing.T, d time.Duration) *peer {
	t.Helper()
	select {
	case p := <-pn.peers:
		return p
	case <-time.After(d):
		t.Fatalf("no connection within %v", d)
		return nil
	}
}

// noDialWithin fails if the client dials within d of fake time.
func (pn *pipeNet) noDialWithin(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case p := <-pn.peers:
		t.Fatalf("unexpected connection to %s", p.addr)
	case <-time.After(d):
	}
}

// movedLog keeps what WithMovedFunc was told.
type movedLog struct{ ch chan Moved }

func newMovedLog() *movedLog       { return &movedLog{ch: make(chan Moved, 16)} }
func (m *movedLog) f(mv Moved)     { m.ch <- mv }
func (m *movedLog) option() Option { return WithMovedFunc(m.f) }
func (m *movedLog) next(t *testing.T) Moved {
	t.Helper()
	select {
	case mv := <-m.ch:
		return mv
	default:
		t.Fatalf("no move reported")
		return Moved{}
	}
}
