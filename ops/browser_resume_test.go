package ops_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/ops"
)

// v3Claim makes a claim of protocol version 3 on name over the raw
// protocol and returns its connection and what resumes it.
func v3Claim(t *testing.T, ts *batontest.Server, name, owner string) (*batontest.Conn, *batontest.Claim) {
	t.Helper()
	c := batontest.Dial(t, ts.Addr)
	c.AcquireV3(name, time.Minute, false, 1, false, owner)
	cl := &batontest.Claim{Name: name, Lease: time.Minute, Limit: 1}
	if f := c.ReadFrame(5 * time.Second); !cl.Update(f) {
		t.Fatalf("%s: got %v, want an answer with a credential", owner, f)
	}
	return c, cl
}

// TestBrowserResumedAndPending: after a clean restart, the claims of
// version 3 the stop listed are shown: a holder that came back as resumed
// (and from which epoch), a waiter not back yet as pending; when it comes
// back, it is shown resumed in its place. /v1/locks carries the same, and
// an owner text is shown as text.
func TestBrowserResumedAndPending(t *testing.T) {
	ts := batontest.StartServer(t)
	const owner = `<img src=x onerror="document.title='xss'">`
	h, hc := v3Claim(t, ts, "jobs/nightly", owner)
	w, wc := v3Claim(t, ts, "jobs/nightly", "waiter@host-2")
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		ts.Stop(t)
	}()
	for _, c := range []*batontest.Conn{h, w} {
		c.ReadFrame(5 * time.Second) // SHUTDOWN
		c.Conn.Close()
	}
	<-stopped
	ts.Start(t)
	epoch := hc.ID >> 40

	hs := httptest.NewServer(ops.NewHandler(ops.Config{Backend: ts.Srv, Gatherer: ts.Srv.Registry()}))
	t.Cleanup(hs.Close)
	h2 := batontest.Dial(t, ts.Addr)
	h2.Write(hc.ResumeFrame(t, owner))
	if f := h2.ReadFrame(5 * time.Second); f.Type != wire.TypeAcquired || f.Token != hc.ID {
		t.Fatalf("the holder's resume: got %v, want ACQUIRED %d", f, hc.ID)
	}

	// The API: the holder resumed from its epoch, the waiter pending.
	resp, err := http.Get(hs.URL + "/v1/locks/jobs%2Fnightly")
	if err != nil {
		t.Fatal(err)
	}
	var lock struct {
		Holder struct {
			Owner            string `json:"owner"`
			ResumedFromEpoch uint64 `json:"resumed_from_epoch"`
			Pending          bool   `json:"pending"`
		} `json:"holder"`
		Waiters []struct {
			ID      string `json:"id"`
			Pending bool   `json:"pending"`
		} `json:"waiters"`
	}
	json.NewDecoder(resp.Body).Decode(&lock)
	resp.Body.Close()
	if lock.Holder.ResumedFromEpoch != epoch || lock.Holder.Pending || len(lock.Waiters) != 1 || !lock.Waiters[0].Pending {
		t.Fatalf("GET /v1/locks/jobs%%2Fnightly: %+v; want the holder resumed from epoch %d and a pending waiter", lock, epoch)
	}

	p := openBrowser(t)
	p.do("open the dashboard", chromedp.Navigate(hs.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-lock="jobs/nightly"]`)))
	row := `document.querySelector('tr[data-lock="jobs/nightly"]')`
	p.waitJS(row+`.querySelector(".tag.v3.resumed") && `+row+`.querySelector(".tag.v3.resumed").textContent === "resumed from epoch `+fmt.Sprint(epoch)+`"`,
		3*time.Second, "the holder shown resumed from its epoch")
	if got := p.eval(row + `.querySelector(".who span span").textContent`); got != owner {
		t.Errorf("the owner shown as %q, want the text %q", got, owner)
	}
	if got := p.eval(`String(document.querySelectorAll("img").length) + " " + document.title`); strings.Contains(got, "xss") || !strings.HasPrefix(got, "0 ") {
		t.Errorf("the owner text became HTML: %s", got)
	}

	p.do("open the lock's page", chromedp.Click(chromedp.CSS(`tr[data-lock="jobs/nightly"] a`)))
	p.waitJS(`document.querySelector("#queue-body tr .tag.v3.pending") !== null`, 3*time.Second, "the waiter shown pending")
	if got := p.eval(`document.querySelector("#holder .tag.v3.resumed").textContent`); got != "resumed from epoch "+fmt.Sprint(epoch) {
		t.Errorf("the holder's page says %q", got)
	}

	// The waiter comes back: in its place, resumed, no longer pending.
	w2 := batontest.Dial(t, ts.Addr)
	w2.Write(wc.ResumeFrame(t, "waiter@host-2"))
	if f := w2.ReadFrame(5 * time.Second); f.Type != wire.TypeWaiting || f.Ticket != wc.ID {
		t.Fatalf("the waiter's resume: got %v, want WAITING with its ticket", f)
	}
	p.waitJS(`document.querySelectorAll("#queue-body tr").length === 1 && document.querySelector("#queue-body tr .tag.v3.pending") === null && `+
		`document.querySelector("#queue-body tr .tag.v3.resumed") !== null`, 3*time.Second, "the waiter shown resumed, in its place")
	p.waitJS(`document.getElementById("history").textContent.includes("resumed")`, 2*time.Second, "the resume in the history")
	p.expectNoConsoleErrors()
}
