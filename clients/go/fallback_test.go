package baton

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// TestVersionFallback: a server that answers VERSION to version 3 (one of
// an older version) gets the same claim as version 1 at once, on a new
// connection to the same address, byte for byte what WithResume(false)
// sends; the address is sent version 1 for a minute, then version 3 is
// tried again. Such a claim ends with its connection, as in version 2.
func TestVersionFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"a:1"}, WithLease(moveLease), WithOwner("h:1"))
		set := c.set.claimSettings("jobs", []Option{WithResume(false)})
		_, legacy, _, _, err := set.claimFrames("jobs")
		if err != nil {
			t.Fatal(err)
		}
		ch := goAcquire(context.Background(), c, "jobs")
		p := pn.accept(t)
		if a, _ := p.acquire(t); a.Version != wire.Version3 {
			t.Fatalf("first ACQUIRE of version %d, want 3", a.Version)
		}
		start := time.Now()
		p.fail(t, wire.CodeVersion, "protocol version 3 is not supported, want 1 or 2")
		p = pn.accept(t)
		f := p.next(t, wire.TypeAcquire)
		if got := wire.AppendFrame(nil, f.typ, f.payload); p.addr != "a:1" || time.Since(start) != 0 || !bytes.Equal(got, legacy) {
			t.Fatalf("after VERSION: % x to %s after %v, want % x to a:1 at once", got, p.addr, time.Since(start), legacy)
		}
		p.acquired(t, 7)
		l := result(t, ch).l

		// Remembered: the next claim to the address is of version 1 at once.
		ch2 := goAcquire(context.Background(), c, "other")
		q := pn.accept(t)
		if a, _ := q.acquire(t); a.Version != wire.Version1 {
			t.Errorf("a claim 30s later: version %d, want 1 (remembered)", a.Version)
		}
		q.acquired(t, 8)
		result(t, ch2).l.Release()

		// A claim of version 1 ends with its connection.
		p.fail(t, wire.CodeShutdown, "")
		<-l.Done()
		if err := l.Err(); !errors.Is(err, ErrShutdown) {
			t.Errorf("Err: %v, want ErrShutdown", err)
		}
		pn.noDialWithin(t, v3Retry)

		// After a minute, version 3 is tried again.
		ch3 := goAcquire(context.Background(), c, "jobs")
		q = pn.accept(t)
		if a, _ := q.acquire(t); a.Version != wire.Version3 {
			t.Fatalf("a claim a minute later: version %d, want 3", a.Version)
		}
		q.acquiredV3(t, 9, 1, testCred)
		result(t, ch3).l.Release()
	})
}

// TestResumeToAnOlderNode: an attempt answered VERSION ends there (that
// node cannot continue the claim), the move goes on to the next address,
// and new claims to that node are sent version 1.
func TestResumeToAnOlderNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"a:1", "b:1"}, WithLease(moveLease))
		l, p := holdV3(t, c, pn, 7)
		p.fail(t, wire.CodeShutdown, "")
		q := pn.accept(t)
		q.resume(t, true, 7, 1, testCred)
		q.fail(t, wire.CodeVersion, "")
		q = pn.accept(t)
		if q.addr != "b:1" {
			t.Fatalf("next attempt to %s, want b:1", q.addr)
		}
		q.resume(t, true, 7, 1, testCred)
		q.acquiredV3(t, 7, 1, testCred)
		synctest.Wait()
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
		if c.speaksV3("a:1") || !c.speaksV3("b:1") {
			t.Errorf("speaks version 3: a:1 %v, b:1 %v; want false, true", c.speaksV3("a:1"), c.speaksV3("b:1"))
		}
	})
}

// TestWithResumeOff: WithResume(false) sends version 1 (version 2 for a
// shared claim), and the claim ends with its connection whatever the
// server would have given.
func TestWithResumeOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"a:1", "b:1"}, WithLease(moveLease), WithResume(false))
		ch := goAcquire(context.Background(), c, "jobs")
		p := pn.accept(t)
		if a, _ := p.acquire(t); a.Version != wire.Version1 {
			t.Fatalf("ACQUIRE of version %d, want 1", a.Version)
		}
		p.acquired(t, 7)
		l := result(t, ch).l
		p.fail(t, wire.CodeNotLeader, "b:1")
		<-l.Done()
		if err := l.Err(); !errors.Is(err, ErrNotLeader) {
			t.Errorf("Err: %v, want ErrNotLeader", err)
		}
		pn.noDialWithin(t, time.Minute)
	})
}
