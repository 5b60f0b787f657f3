package ops_test

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/ops"
)

// liveClaim is a claim of protocol version 2 made over the raw protocol,
// which heartbeats every quarter lease like a real client, so the page
// shows it as a live one.
type liveClaim struct {
	owner   string
	granted chan uint64      // the token, once it holds
	ended   chan *wire.Error // the ERROR that ended it (nil: the connection broke)
}

// claimV2 makes a shared claim (limit) or an exclusive one (shared false,
// limit 1) on name, and waits until the server has it, holding or
// waiting. t.Cleanup closes it and waits for its goroutines.
func claimV2(t *testing.T, ts *batontest.Server, name, owner string, shared bool, limit uint16) *liveClaim {
	t.Helper()
	nc, err := net.DialTimeout("tcp", ts.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a := wire.Acquire{Version: wire.Version2, LeaseMs: uint32(realClientLease / time.Millisecond), Limit: limit, Name: name, Owner: owner}
	if shared {
		a.Flags = wire.FlagShared
	}
	frame, err := wire.AppendAcquire(nil, a)
	if err != nil {
		t.Fatal(err)
	}
	c := &liveClaim{owner: owner, granted: make(chan uint64, 1), ended: make(chan *wire.Error, 1)}
	answered := make(chan struct{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// The reader: the first answer, then pushes and the ending ERROR.
	conn := batontest.NewConn(t, nc)
	wg.Go(func() {
		first, holds := true, false
		for {
			f, err := conn.TryReadFrame(time.Hour)
			if first {
				close(answered)
				first = false
			}
			switch {
			case err != nil:
				c.ended <- nil
				return
			case f.Type == wire.TypeError:
				c.ended <- f.Err
				return
			case f.Type == wire.TypeAcquired && !holds: // later ones answer heartbeats
				holds = true
				c.granted <- f.Token
			}
		}
	})
	// The heartbeat, every quarter lease, as a client sends it.
	wg.Go(func() {
		tick := time.NewTicker(realClientLease / 4)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := nc.Write(wire.AppendHeartbeat(nil)); err != nil {
					return
				}
			}
		}
	})
	t.Cleanup(func() {
		close(stop)
		nc.Close()
		wg.Wait()
	})
	if _, err := nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	select {
	case <-answered:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no answer to its ACQUIRE of %q", owner, name)
	}
	return c
}

// expectEnded waits for c's session to end with code.
func (c *liveClaim) expectEnded(t *testing.T, code wire.Code) {
	t.Helper()
	select {
	case e := <-c.ended:
		if e == nil || e.Code != code {
			t.Fatalf("%s ended with %v, want ERROR %v", c.owner, e, code)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: its session did not end (want ERROR %v)", c.owner, code)
	}
}

// expectGranted waits for c to hold, and returns its token.
func (c *liveClaim) expectGranted(t *testing.T) uint64 {
	t.Helper()
	select {
	case tok := <-c.granted:
		c.granted <- tok // for a later look
		return tok
	case <-time.After(5 * time.Second):
		t.Fatalf("%s was not granted", c.owner)
	}
	return 0
}

// stillOn fails unless c's session still runs.
func (c *liveClaim) stillOn(t *testing.T) {
	t.Helper()
	select {
	case e := <-c.ended:
		t.Fatalf("%s ended (%v), want it still on", c.owner, e)
	default:
	}
}

// tableOverflow names the visible tables wider than their scrolling box
// ("" if none): the page's width does not show those.
const tableOverflow = `[...document.querySelectorAll(".wrap")].filter(w => w.offsetParent && w.scrollWidth > w.clientWidth)
	.map(w => w.firstElementChild.id + " " + w.scrollWidth + "px in " + w.clientWidth + "px").join("; ")`

// getLog counts the GETs the ops API answers, by escaped path.
type getLog struct {
	mu sync.Mutex
	n  map[string]int
}

func (l *getLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			l.mu.Lock()
			if l.n == nil {
				l.n = make(map[string]int)
			}
			l.n[r.URL.EscapedPath()]++
			l.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

func (l *getLog) count(path string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[path]
}

// TestBrowserSharedClaims: a semaphore of 3 and a read/write lock on the
// dashboard: every holder with its token, heartbeat bar and time held,
// the slots in use against the limit, each waiter's kind; one holder
// force-released from its own button, every holder from the lock's (whose
// confirmation says how many); kick as before; the history says which
// holder each grant and release was.
func TestBrowserSharedClaims(t *testing.T) {
	posts, gets := &postLog{}, &getLog{}
	ts, hs := startEvents(t, ops.Config{}, func(h http.Handler) http.Handler { return gets.wrap(posts.wrap(h)) })
	var sem []*liveClaim
	for _, owner := range []string{"gpu@worker-1", "gpu@worker-2", "gpu@worker-3", "gpu@worker-4"} {
		sem = append(sem, claimV2(t, ts, "gpu/pool", owner, true, 3))
	}
	readers := []*liveClaim{claimV2(t, ts, "config/db", "reader@api-1", true, wire.MaxLimit), claimV2(t, ts, "config/db", "reader@api-2", true, wire.MaxLimit)}
	writer := claimV2(t, ts, "config/db", "writer@migrate", false, 1)
	lateReader := claimV2(t, ts, "config/db", "reader@api-3", true, wire.MaxLimit)
	holdWith(t, ts.Addr, "deploy/web", "ci@runner-3")
	for _, c := range append(sem[:3:3], readers...) {
		c.expectGranted(t)
	}
	waitQueue(t, ts, "gpu/pool", 1)
	waitQueue(t, ts, "config/db", 2)

	p := openBrowser(t)
	p.do("open the dashboard", chromedp.Navigate(hs.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-lock="gpu/pool"]`)))
	// The list: a row for each holder, the slots and waiters once per lock.
	const poolRows = `[...document.querySelectorAll('tr[data-lock="gpu/pool"], tr[data-holder-of="gpu/pool"]')]`
	p.waitJS(poolRows+`.length === 3`, 3*time.Second, "a row for each of the semaphore's 3 holders")
	gv, _ := ts.Srv.Lock("gpu/pool")
	for i, h := range gv.Holders {
		row := fmt.Sprintf(poolRows+`[%d]`, i)
		if got := p.eval(row + `.textContent`); !strings.Contains(got, h.Owner) || !strings.Contains(got, fmt.Sprint(h.Token)) {
			t.Errorf("row %d of gpu/pool: %q, want holder %s with token %d", i, got, h.Owner, h.Token)
		}
		if p.eval(`String(!!`+row+`.querySelector(".meter") && !!`+row+`.querySelector("[data-since]"))`) != "true" {
			t.Errorf("row %d of gpu/pool has no heartbeat bar or time held", i)
		}
	}
	for _, want := range []struct{ lock, slots, waiters string }{
		{"gpu/pool", "3 / 3", "1"}, {"config/db", "2 / 65535", "2"}, {"deploy/web", "1 / 1", "0"},
	} {
		row := `document.querySelector('tr[data-lock="` + want.lock + `"]')`
		p.waitJS(row+`.querySelector("td.slots").textContent === "`+want.slots+`" && `+row+`.querySelector("td:last-child").textContent === "`+want.waiters+`"`,
			3*time.Second, want.lock+": slots "+want.slots+", waiters "+want.waiters)
	}

	// The semaphore's page: every holder, the limit, the waiter's kind.
	p.do("open the semaphore's page", chromedp.Click(chromedp.CSS(`tr[data-lock="gpu/pool"] a`)))
	p.waitJS(`document.querySelectorAll("#holders-body tr").length === 3`, 2*time.Second, "3 holders on the lock's page")
	if got := p.eval(`document.getElementById("holder-heading").textContent`); got != "Holders 3 / 3" {
		t.Errorf("holders heading %q, want %q", got, "Holders 3 / 3")
	}
	if got := p.eval(`document.getElementById("limit-note").textContent`); !strings.HasPrefix(got, "Limit 3: at most 3 shared claims hold it at once (3 do)") {
		t.Errorf("limit note %q", got)
	}
	if got := p.eval(`document.querySelector("#queue-body tr td:nth-child(2)").textContent`); got != "gpu@worker-4 shared" {
		t.Errorf("the waiter's cell %q, want its owner and kind", got)
	}
	if got := p.eval(`document.getElementById("force-release").textContent`); got != "Force-release all 3…" {
		t.Errorf("the lock's release button says %q, want it to count the holders", got)
	}

	// One holder, from its own button: cancel first, then confirm.
	second := gv.Holders[1]
	secondButton := `#holders-body tr[data-session="` + second.ID + `"] button.release-one`
	p.do("release one holder", chromedp.Click(chromedp.CSS(secondButton)), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")))
	if got := p.eval(`document.getElementById("confirm-text").textContent`); !strings.Contains(got, "gpu@worker-2 (session "+second.ID) ||
		!strings.Contains(got, "the other 2 holders keep theirs") {
		t.Errorf("the confirmation of one holder's release says %q", got)
	}
	p.do("cancel", chromedp.Click(chromedp.CSS(`#confirm button[value="cancel"]`)))
	time.Sleep(100 * time.Millisecond)
	sem[1].stillOn(t)
	p.do("release one holder again", chromedp.Click(chromedp.CSS(secondButton)), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")))
	sem[1].expectEnded(t, wire.CodeForceReleased)
	sem[3].expectGranted(t) // the freed slot goes to the waiter
	sem[0].stillOn(t)
	sem[2].stillOn(t)
	// The log has the POST once its handler has returned, which may be
	// after the session it ended has seen its ERROR.
	batontest.Eventually(t, 2*time.Second, func() bool { return posts.has("/v1/sessions/" + second.ID + "/release 200") },
		"no POST /v1/sessions/%s/release answered 200", second.ID)
	p.waitJS(`[...document.querySelectorAll("#holders-body tr td:first-child .who > span")].map(e => e.textContent).join() === "gpu@worker-1 shared,gpu@worker-3 shared,gpu@worker-4 shared"`,
		2*time.Second, "holders 1, 3 and 4 after the release of 2")
	p.waitJS(`document.querySelectorAll("#queue-body tr").length === 0`, time.Second, "the waiter left the queue for the slot")
	// The history says which holder: the release and the grant name their sessions.
	gv, _ = ts.Srv.Lock("gpu/pool")
	history := p.eval(`document.getElementById("history").textContent`)
	for _, want := range []string{
		"gpu@worker-2 · session " + second.ID + " · shared · token " + fmt.Sprint(second.Token),
		"gpu@worker-4 · session " + gv.Holders[2].ID + " · shared · token " + fmt.Sprint(gv.Holders[2].Token),
	} {
		if !strings.Contains(history, want) {
			t.Errorf("history %q: want %q", history, want)
		}
	}

	// Every holder, from the lock's button: the confirmation counts them.
	p.do("release all", chromedp.Click(chromedp.CSS("#force-release")), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")))
	if got := p.eval(`document.getElementById("confirm-title").textContent`); got != "Force-release all 3 holders of gpu/pool?" {
		t.Errorf("confirmation title %q", got)
	}
	if got := p.eval(`document.getElementById("confirm-text").textContent`); !strings.HasPrefix(got, "All 3 holders get FORCE_RELEASED: gpu@worker-1 (session ") {
		t.Errorf("confirmation text %q", got)
	}
	p.do("confirm", chromedp.Click(chromedp.CSS("#confirm-ok")))
	for _, i := range []int{0, 2, 3} {
		sem[i].expectEnded(t, wire.CodeForceReleased)
	}
	p.waitJS(`document.getElementById("toast").textContent === "Released gpu/pool from 3 sessions"`, 2*time.Second, "the toast counts the sessions")
	p.waitJS(`document.getElementById("holder").textContent.includes("Nobody holds this lock.")`, 2*time.Second, "nobody holds gpu/pool")

	// The read/write lock: two readers hold, a writer and a reader wait.
	p.do("open the read/write lock's page", chromedp.Navigate(hs.URL+"/#/lock/config%2Fdb"), chromedp.WaitVisible(chromedp.CSS("#holders-body")))
	p.waitJS(`[...document.querySelectorAll("#queue-body tr td:nth-child(2)")].map(e => e.textContent).join() === "writer@migrate exclusive,reader@api-3 shared"`,
		2*time.Second, "the writer, then the late reader, each with its kind")
	dv, _ := ts.Srv.Lock("config/db")
	for _, r := range dv.Holders {
		p.do("release reader "+r.Owner, chromedp.Click(chromedp.CSS(`#holders-body tr[data-session="`+r.ID+`"] button.release-one`)),
			chromedp.WaitVisible(chromedp.CSS("#confirm-ok")), chromedp.Click(chromedp.CSS("#confirm-ok")))
		p.waitJS(`!document.getElementById("confirm").open && !document.querySelector('#holders-body tr[data-session="`+r.ID+`"]')`, 2*time.Second, "reader "+r.Owner+" gone")
	}
	readers[0].expectEnded(t, wire.CodeForceReleased)
	readers[1].expectEnded(t, wire.CodeForceReleased)
	writer.expectGranted(t)
	lateReader.stillOn(t) // behind the writer: nobody overtakes
	p.waitJS(`document.querySelector("#holders-body tr td:first-child .who > span").textContent === "writer@migrate exclusive" && document.getElementById("holder-slots").textContent === "1 / 65535"`,
		2*time.Second, "the writer holds alone")
	// Kick is unchanged: the late reader leaves the queue.
	p.do("kick the late reader", chromedp.Click(chromedp.CSS("#queue-body button")), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")))
	lateReader.expectEnded(t, wire.CodeKicked)
	p.waitJS(`document.querySelectorAll("#queue-body tr").length === 0`, 2*time.Second, "queue empty after the kick")
	// The writer's grant: its own session and token, no "shared".
	wv, _ := ts.Srv.Lock("config/db")
	p.waitJS(`document.getElementById("history").textContent.includes("writer@migrate · session `+wv.Holders[0].ID+` · token `+fmt.Sprint(wv.Holders[0].Token)+`")`,
		2*time.Second, "the writer's grant in the history")

	// A name whose last shared session ended has no limit; the next shared
	// claim sets it anew, and the page, which the events do not tell, asks.
	p.eval(`location.hash = "#/", ""`)
	asked := gets.count("/v1/locks/gpu%2Fpool")
	claimV2(t, ts, "gpu/pool", "gpu@worker-5", true, 3).expectGranted(t)
	claimV2(t, ts, "gpu/pool", "gpu@worker-6", true, 3).expectGranted(t)
	p.waitJS(`document.querySelector('tr[data-lock="gpu/pool"] td.slots').textContent === "2 / 3"`, 3*time.Second, "gpu/pool: 2 / 3 again")
	if gets.count("/v1/locks/gpu%2Fpool") == asked {
		t.Error("the page did not ask for the limit of gpu/pool when its shared claims came back")
	}

	// A phone-sized screen: the list with several holders fits.
	p.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)),
		chromedp.Navigate(hs.URL+"/#/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-holder-of="gpu/pool"]`)))
	if w := p.eval(`String(document.documentElement.scrollWidth)`); w != "390" {
		t.Errorf("the list is %spx wide on a 390px screen", w)
	}
	if got := p.eval(tableOverflow); got != "" {
		t.Errorf("on a 390px screen, a table scrolls sideways: %s", got)
	}
	p.do("phone: the semaphore's page", chromedp.Navigate(hs.URL+"/#/lock/gpu%2Fpool"), chromedp.WaitVisible(chromedp.CSS("#holders-body")))
	if w := p.eval(`String(document.documentElement.scrollWidth)`); w != "390" {
		t.Errorf("the semaphore's page is %spx wide on a 390px screen", w)
	}
	if got := p.eval(tableOverflow); got != "" {
		t.Errorf("on a 390px screen, a table scrolls sideways: %s", got)
	}
	p.expectNoConsoleErrors()
}
