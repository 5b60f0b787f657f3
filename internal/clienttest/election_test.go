package clienttest

import (
	"context"
	"errors"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
)

// TestIntegrationCampaign: against the real server, candidates lead one at
// a time, in the order they campaigned, each with its value as the owner
// text the server shows; the leadership context ends on loss; Resign hands
// the lead on at once; each term's token is higher than the last.
func TestIntegrationCampaign(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	const election = "leader/scheduler"
	a := newTestClient(t, []string{srv.Addr})
	b := newTestClient(t, []string{srv.Addr})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	leaderA, err := a.Campaign(ctx, election, "node-a:8080")
	if err != nil {
		t.Fatalf("Campaign a: %v", err)
	}
	if _, hv := grantedBy(t, srv.Srv, election); hv.Owner != "node-a:8080" || hv.Token != leaderA.Token() {
		t.Errorf("server's holder %+v, want owner node-a:8080 with token %d", hv, leaderA.Token())
	}
	if leaderA.Value() != "node-a:8080" {
		t.Errorf("Value() = %q", leaderA.Value())
	}

	type campaign struct {
		ld  *baton.Leadership
		err error
	}
	bLeads := make(chan campaign, 1)
	go func() {
		ld, err := b.Campaign(ctx, election, "node-b:8080")
		bLeads <- campaign{ld, err}
	}()
	batontest.Eventually(t, 5*time.Second, func() bool {
		lv, _ := srv.Srv.Lock(election)
		return len(lv.Waiters) == 1
	}, "candidate b is not waiting")

	// An operator takes the lead away: a's leadership context ends with the
	// cause, and b leads.
	if _, err := srv.Srv.ForceRelease(election); err != nil {
		t.Fatal(err)
	}
	select {
	case <-leaderA.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a's leadership context did not end on the loss")
	}
	if err := leaderA.Err(); !errors.Is(err, baton.ErrLockLost) || !errors.Is(err, baton.ErrForceReleased) {
		t.Errorf("a's Err() = %v, want ErrLockLost and ErrForceReleased", err)
	}
	if err := leaderA.Resign(); !errors.Is(err, baton.ErrForceReleased) {
		t.Errorf("a's Resign after the loss = %v, want the loss", err)
	}
	var leaderB *baton.Leadership
	select {
	case r := <-bLeads:
		if r.err != nil {
			t.Fatalf("Campaign b: %v", r.err)
		}
		leaderB = r.ld
	case <-time.After(5 * time.Second):
		t.Fatal("b does not lead after a lost the lead")
	}
	if leaderB.Token() <= leaderA.Token() {
		t.Errorf("b's term %d, want above a's %d", leaderB.Token(), leaderA.Token())
	}
	if _, hv := grantedBy(t, srv.Srv, election); hv.Owner != "node-b:8080" {
		t.Errorf("server's holder %+v, want owner node-b:8080", hv)
	}

	// a campaigns again and waits; b resigns; a leads at once.
	aAgain := make(chan campaign, 1)
	go func() {
		ld, err := a.Campaign(ctx, election, "node-a:8080")
		aAgain <- campaign{ld, err}
	}()
	batontest.Eventually(t, 5*time.Second, func() bool {
		lv, _ := srv.Srv.Lock(election)
		return len(lv.Waiters) == 1
	}, "candidate a is not waiting again")
	resignedAt := time.Now()
	if err := leaderB.Resign(); err != nil {
		t.Errorf("b's Resign: %v, want nil (it led until then)", err)
	}
	if err := leaderB.Err(); err != baton.ErrReleased {
		t.Errorf("b's Err() after Resign = %v, want ErrReleased", err)
	}
	select {
	case r := <-aAgain:
		if r.err != nil {
			t.Fatalf("Campaign a again: %v", r.err)
		}
		if d := time.Since(resignedAt); d > 2*time.Second {
			t.Errorf("a led %v after b resigned, want at once", d)
		}
		if r.ld.Token() <= leaderB.Token() {
			t.Errorf("a's new term %d, want above b's %d", r.ld.Token(), leaderB.Token())
		}
		r.ld.Resign()
	case <-time.After(5 * time.Second):
		t.Fatal("a does not lead after b resigned")
	}

	// The value is owner text: refused before dialling if it breaks the rules.
	if _, err := a.Campaign(ctx, election, "bad\nvalue"); !errors.Is(err, baton.ErrBadRequest) {
		t.Errorf("Campaign with a control character in the value: %v, want ErrBadRequest", err)
	}
}
