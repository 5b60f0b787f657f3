package ops_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/server"
)

// chromiumPath is Debian's chromium, which .ci/dash.sh installs. The tests
// never download a browser.
const chromiumPath = "/usr/bin/chromium"

// page is one browser tab on the dashboard, with what it wrote to its console.
type page struct {
	t   *testing.T
	ctx context.Context
	mu  sync.Mutex
	log []chromedp.ConsoleMessage
}

// openBrowser starts a headless chromium with a fresh profile; t.Cleanup
// stops it. Without chromium the test is skipped, except in CI.
func openBrowser(t *testing.T) *page {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing in CI: .ci/dash.sh must install chromium (%v)", chromiumPath, err)
		}
		t.Skipf("SKIPPED: browser test needs %s (apt-get install -y --no-install-recommends chromium)", chromiumPath)
	}
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 860),
	)
	ctx, cancel := chromedp.NewContext(allocCtx)
	p := &page{t: t, ctx: ctx}
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	consoleDone := make(chan struct{})
	go func() {
		defer close(consoleDone)
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			p.mu.Lock()
			p.log = append(p.log, m)
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		<-consoleDone
	})
	return p
}

// do runs browser steps, each bounded so a missing element fails the test
// instead of hanging it.
func (p *page) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.t.Fatalf("%s: %v (console: %q)", what, err, p.consoleErrors())
	}
}

func (p *page) eval(js string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// fetchStatus is the status of a GET of path made by the page itself.
func (p *page) fetchStatus(path string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`fetch(%q).then(r => String(r.status))`, path), chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("fetch %s from the page: %v", path, err)
	}
	return got
}

// waitJS waits until the expression is true, up to within.
func (p *page) waitJS(js string, within time.Duration, what string) time.Duration {
	p.t.Helper()
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		cancel()
		if err == nil && ok {
			return time.Since(start)
		}
		if time.Since(start) > within {
			p.t.Fatalf("%s: not true within %v: %s (err %v)", what, within, js, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// consoleErrors are the errors and exceptions the page wrote so far.
func (p *page) consoleErrors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, m := range p.log {
		if m.Type != chromedp.ConsoleError && m.Type != chromedp.ConsoleException {
			continue
		}
		out = append(out, m.String())
	}
	return out
}

func (p *page) clearLog() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log = nil
}

func (p *page) expectNoConsoleErrors() {
	p.t.Helper()
	if errs := p.consoleErrors(); len(errs) > 0 {
		p.t.Fatalf("the page wrote %d console errors:\n%s", len(errs), strings.Join(errs, "\n"))
	}
}

// realClientLease is the lease of the tests' real clients: long enough
// that a client starved of the CPU on a loaded machine never loses its
// session while the page shows it (the page would then act on a session
// that is gone: a 404, and a console error).
const realClientLease = 10 * time.Second

// holdWith acquires name with a real client and returns the lock.
func holdWith(t *testing.T, addr, name, owner string) *baton.Lock {
	t.Helper()
	c, err := baton.New([]string{addr}, baton.WithOwner(owner), baton.WithLease(realClientLease))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("acquire %q: %v", name, err)
	}
	t.Cleanup(func() { l.Release() })
	return l
}

// queuedClient is a real client waiting in a queue.
type queuedClient struct {
	lock chan *baton.Lock
	err  chan error
}

func waitFor(t *testing.T, addr, name, owner string) *queuedClient {
	t.Helper()
	c, err := baton.New([]string{addr}, baton.WithOwner(owner), baton.WithLease(realClientLease))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &queuedClient{lock: make(chan *baton.Lock, 1), err: make(chan error, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		l, err := c.Acquire(ctx, name)
		if err != nil {
			w.err <- err
			return
		}
		w.lock <- l
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		select {
		case l := <-w.lock:
			l.Release()
		default:
		}
	})
	return w
}

func TestBrowserDashboardLive(t *testing.T) {
	ts, hs := startEvents(t, ops.Config{}, nil)
	p := openBrowser(t)
	p.do("open the dashboard", chromedp.Navigate(hs.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#locks-table")))
	p.waitJS(`document.getElementById("live").textContent === "live"`, 5*time.Second, "stream connected")

	// A lock taken by a real client appears within a second.
	start := time.Now()
	holder := holdWith(t, ts.Addr, "deploy/web", "alice@build-1")
	took := p.waitJS(`!!document.querySelector('tr[data-lock="deploy/web"]') &&
		document.querySelector('tr[data-lock="deploy/web"]').textContent.includes("alice@build-1")`, 3*time.Second, "lock row")
	if d := time.Since(start); took > time.Second {
		t.Fatalf("the lock appeared %v after the grant (%v after Acquire started), want within 1s", took, d)
	}
	t.Logf("lock appeared on the page %v after the grant", took)

	// A holder that goes silent: its heartbeat bar turns amber, then red,
	// then the lock leaves the table when the lease ends it.
	silent := batontest.Dial(t, ts.Addr)
	silent.Acquire("stuck/job", 4*time.Second, false, "hung@build-9")
	silent.ReadFrame(5 * time.Second)
	const bar = `document.querySelector('tr[data-lock="stuck/job"] .meter')`
	p.waitJS(`!!`+bar+` && `+bar+`.classList.contains("amber")`, 4*time.Second, "amber bar of a silent holder")
	p.waitJS(`!!`+bar+` && `+bar+`.classList.contains("red")`, 4*time.Second, "red bar of a silent holder")
	p.waitJS(`!document.querySelector('tr[data-lock="stuck/job"]')`, 6*time.Second, "expired lock gone from the table")

	// A FIFO queue, in order, on the lock's page.
	w1 := waitFor(t, ts.Addr, "deploy/web", "bob@build-2")
	waitQueue(t, ts, "deploy/web", 1)
	w2 := waitFor(t, ts.Addr, "deploy/web", "carol@build-3")
	waitQueue(t, ts, "deploy/web", 2)
	p.waitJS(`document.querySelector('tr[data-lock="deploy/web"] td:last-child').textContent === "2"`, time.Second, "2 waiters in the table")
	p.do("open the lock's page", chromedp.Click(chromedp.CSS(`tr[data-lock="deploy/web"] a`)))
	p.waitJS(`document.querySelectorAll("#queue-body tr").length === 2`, time.Second, "queue rows")
	if got := p.eval(`[...document.querySelectorAll("#queue-body tr td:nth-child(2)")].map(td => td.textContent).join(",")`); got != "bob@build-2,carol@build-3" {
		t.Fatalf("queue on the page: got %q, want bob then carol", got)
	}

	// Force-release from the page: click, confirm; the real client loses it
	// and the next waiter shows as holder.
	p.do("force-release", chromedp.Click(chromedp.CSS("#force-release")), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")))
	select {
	case <-holder.Done():
		t.Fatal("the lock was released before the confirmation")
	case <-time.After(100 * time.Millisecond):
	}
	p.do("confirm", chromedp.Click(chromedp.CSS("#confirm-ok")))
	select {
	case <-holder.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder still holds 5s after the confirmed force-release")
	}
	if err := holder.Err(); !errors.Is(err, baton.ErrForceReleased) {
		t.Fatalf("holder's error: got %v, want ErrForceReleased", err)
	}
	var bob *baton.Lock
	select {
	case bob = <-w1.lock:
	case err := <-w1.err:
		t.Fatalf("bob: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("bob was not granted the lock")
	}
	p.waitJS(`document.getElementById("holder").textContent.includes("bob@build-2")`, time.Second, "bob shown as holder")
	p.waitJS(`document.getElementById("history").textContent.includes("force released")`, time.Second, "history entry")
	if tok := p.eval(`document.querySelector("#holder dl dd:nth-of-type(4)").textContent`); tok != fmt.Sprint(bob.Token()) {
		t.Fatalf("token on the page %q, want %d", tok, bob.Token())
	}

	// Kick the remaining waiter by keyboard alone: Tab from the top of the
	// page to its Kick button, Enter; the confirmation opens on Cancel:
	// Space there cancels; again, then Tab to the Kick of the dialog and Space.
	p.eval(`document.activeElement.blur(), ""`)
	p.tabTo(`#queue-body button`, 30)
	p.do("press enter on kick", chromedp.KeyEvent("\r"), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")))
	if got := p.eval(`document.activeElement.textContent`); got != "Cancel" {
		t.Fatalf("the confirmation opened with focus on %q, want Cancel", got)
	}
	p.do("cancel by space", chromedp.KeyEvent(" "))
	p.waitJS(`!document.getElementById("confirm").open`, time.Second, "dialog closed by Space on Cancel")
	waitQueue(t, ts, "deploy/web", 1)
	p.tabTo(`#queue-body button`, 30)
	p.do("press enter on kick again", chromedp.KeyEvent("\r"), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")))
	p.tabTo(`#confirm-ok`, 3)
	p.do("confirm by space", chromedp.KeyEvent(" "))
	select {
	case err := <-w2.err:
		if !errors.Is(err, baton.ErrKicked) {
			t.Fatalf("carol: got %v, want ErrKicked", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("carol was not kicked")
	}
	p.waitJS(`document.querySelectorAll("#queue-body tr").length === 0`, time.Second, "queue empty")

	// A phone-sized screen: no sideways scrolling on any view, and a
	// screenshot to look at (docs/dashboard-phone.png with
	// BATON_UPDATE_SCREENSHOT=1).
	p.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)),
		chromedp.Navigate(hs.URL+"/#/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-lock="deploy/web"]`)))
	for _, view := range []struct{ hash, ready string }{
		{"#/", `tr[data-lock="deploy/web"]`}, {"#/lock/deploy%2Fweb", "#force-release"}, {"#/server", "#stats .stat"},
	} {
		p.do("phone: "+view.hash, chromedp.Navigate(hs.URL+"/"+view.hash), chromedp.WaitVisible(chromedp.CSS(view.ready)))
		if w := p.eval(`String(document.documentElement.scrollWidth)`); w != "390" {
			t.Fatalf("%s is %spx wide on a 390px screen", view.hash, w)
		}
		if view.hash == "#/" {
			p.screenshot("dashboard-phone.png", false)
		}
	}
	p.expectNoConsoleErrors()
}

// tabTo presses Tab until the focused element matches sel, at most max times.
func (p *page) tabTo(sel string, max int) {
	p.t.Helper()
	for range max {
		p.do("tab", chromedp.KeyEvent("\t"))
		if p.eval(fmt.Sprintf(`String(!!document.activeElement && document.activeElement.matches(%q))`, sel)) == "true" {
			return
		}
	}
	p.t.Fatalf("%d Tab presses never reached %s (at %s)", max, sel, p.eval(`document.activeElement.outerHTML.slice(0, 120)`))
}

// screenshot takes a PNG of the page (the whole page if full, else the
// viewport); it goes to docs/name with BATON_UPDATE_SCREENSHOT=1, else to
// the test's temporary directory.
func (p *page) screenshot(name string, full bool) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	shot := chromedp.CaptureScreenshot()
	if full {
		shot = chromedp.FullScreenshot(100) // 100: PNG; less is JPEG
	}
	png, err := chromedp.Run(ctx, shot)
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := p.t.TempDir()
	if os.Getenv("BATON_UPDATE_SCREENSHOT") == "1" {
		dir = "../docs"
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("wrote %s", filepath.Join(dir, name))
}

// waitQueue waits until the server's queue of name is n long.
func waitQueue(t *testing.T, ts *batontest.Server, name string, n int) {
	t.Helper()
	batontest.Eventually(t, 5*time.Second, func() bool {
		l, ok := ts.Srv.Lock(name)
		return ok && len(l.Waiters) == n
	}, "queue of %q not %d long", name, n)
}

// postLog records the status of every POST the ops API answers.
type postLog struct {
	mu  sync.Mutex
	got []string // "path status"
}

func (l *postLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		rec := &statusWriter{ResponseWriter: w, status: 200}
		h.ServeHTTP(rec, r)
		l.mu.Lock()
		l.got = append(l.got, fmt.Sprintf("%s %d", r.URL.EscapedPath(), rec.status))
		l.mu.Unlock()
	})
}

func (l *postLog) has(entry string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, g := range l.got {
		if g == entry {
			return true
		}
	}
	return false
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

func TestBrowserLoginAndForgery(t *testing.T) {
	posts := &postLog{}
	ts, hs := startEvents(t, ops.Config{AdminToken: "s3cret-token"}, posts.wrap)
	holdWith(t, ts.Addr, "secret/lock", "dave@db-1")
	p := openBrowser(t)

	// Without the token the page shows nothing of /v1/.
	p.do("open", chromedp.Navigate(hs.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	if txt := p.eval(`document.body.innerText`); strings.Contains(txt, "secret/lock") || strings.Contains(txt, "dave") {
		t.Fatalf("the page shows lock data before login: %q", txt)
	}
	if got := p.fetchStatus("/v1/locks"); got != "401" {
		t.Fatalf("GET /v1/locks before login from the page: %s, want 401", got)
	}

	// A wrong token is refused with a message; the right one logs in.
	p.do("wrong token", chromedp.SendKeys(chromedp.CSS("#token"), "nope"), chromedp.Click(chromedp.CSS("#login-form button")))
	p.waitJS(`document.getElementById("login-error").textContent.includes("wrong")`, 3*time.Second, "login error shown")
	p.do("log in", chromedp.SendKeys(chromedp.CSS("#token"), "s3cret-token\r"))
	p.waitJS(`!!document.querySelector('tr[data-lock="secret/lock"]')`, 3*time.Second, "lock shown after login")
	cookies := p.eval(`document.cookie`)
	if strings.Contains(cookies, "baton_session") {
		t.Fatalf("the session cookie is readable by scripts: %q", cookies)
	}

	// A forged cross-site POST from another origin, which the browser sends
	// with the login cookie (127.0.0.1 on another port is the same site), is
	// refused and the lock stays held.
	target := hs.URL + "/v1/locks/secret%2Flock/release"
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><form id="f" method="POST" action="%s"></form>
<script>fetch(%q, {method: "POST", mode: "no-cors", credentials: "include"}).finally(() => document.getElementById("f").submit())</script>`, target, target)
	}))
	defer evil.Close()
	p.do("visit the forging page", chromedp.Navigate(evil.URL+"/"))
	batontest.Eventually(t, 5*time.Second, func() bool {
		posts.mu.Lock()
		defer posts.mu.Unlock()
		return len(posts.got) >= 3 // login x2 + forged fetch (+ form)
	}, "the forged POST never reached the server")
	time.Sleep(300 * time.Millisecond) // the form's POST after the fetch
	if posts.has("/v1/locks/secret%2Flock/release 200") || !posts.has("/v1/locks/secret%2Flock/release 403") {
		t.Fatalf("forged POSTs: got %q, want 403s only", posts.got)
	}
	if _, ok := ts.Srv.Lock("secret/lock"); !ok {
		t.Fatal("a forged request released the lock")
	}

	// Back on the dashboard, logging out ends the session.
	p.clearLog() // the forging page's own errors (its 403s) are not the dashboard's
	p.do("back", chromedp.Navigate(hs.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-lock="secret/lock"]`)))
	p.do("log out", chromedp.Click(chromedp.CSS("#logout")), chromedp.WaitVisible(chromedp.CSS("#token")))
	if txt := p.eval(`document.body.innerText`); strings.Contains(txt, "secret/lock") {
		t.Fatal("lock data still shown after logout")
	}
	p.expectNoConsoleErrors()
	if got := p.fetchStatus("/v1/locks"); got != "401" { // the browser logs this 401 itself
		t.Fatalf("GET /v1/locks after logout: %s, want 401", got)
	}
}

// TestBrowserUnderLoad keeps locks changing while the page is open, checks
// that the page agrees with the server, and with BATON_UPDATE_SCREENSHOT=1
// writes docs/dashboard.png.
func TestBrowserUnderLoad(t *testing.T) {
	// The lock page's histograms need the opt-in per-lock series.
	ts, hs := startEvents(t, ops.Config{}, nil, func(c *server.Config) { c.MetricsLockNames = 100 })
	p := openBrowser(t)
	steady := []struct{ name, owner string }{
		{"billing/invoices", "cron@billing-2"}, {"deploy/api", "ci@runner-7"}, {"deploy/web", "ci@runner-3"},
		{"etl/nightly", "airflow@etl-1"}, {"reports/daily", "reports@worker-4"}, {"search/reindex", "indexer@search-2"},
	}
	for _, s := range steady {
		holdWith(t, ts.Addr, s.name, s.owner)
	}
	for i, owner := range []string{"ci@runner-9", "ci@runner-12", "ci@runner-4"} {
		waitFor(t, ts.Addr, "deploy/web", owner)
		waitQueue(t, ts, "deploy/web", i+1)
	}
	waitFor(t, ts.Addr, "etl/nightly", "airflow@etl-3")
	waitQueue(t, ts, "etl/nightly", 1)
	// A semaphore of 3, full, with a job waiting for a slot; a read/write
	// lock that two readers hold while a writer waits.
	for _, owner := range []string{"render@gpu-1", "render@gpu-2", "render@gpu-3", "render@gpu-4"} {
		claimV2(t, ts, "render/gpus", owner, true, 3)
	}
	for _, owner := range []string{"api@web-1", "api@web-2"} {
		claimV2(t, ts, "config/routes", owner, true, wire.MaxLimit).expectGranted(t)
	}
	claimV2(t, ts, "config/routes", "deploy@ci-5", false, 1)
	waitQueue(t, ts, "render/gpus", 1)
	waitQueue(t, ts, "config/routes", 1)

	// Churn: jobs take and give back their locks, some with waiters.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _ := baton.New([]string{ts.Addr}, baton.WithOwner(fmt.Sprintf("job@worker-%d", i)), baton.WithLease(2*time.Second))
			for ctx.Err() == nil {
				c.Do(ctx, fmt.Sprintf("jobs/shard-%d", i%2), func(ctx context.Context, l *baton.Lock) error {
					select {
					case <-ctx.Done():
					case <-time.After(time.Duration(50+i*30) * time.Millisecond):
					}
					return nil
				})
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()

	p.do("open", chromedp.Navigate(hs.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-lock="deploy/web"]`)))
	time.Sleep(1500 * time.Millisecond) // let the churn run and the bars fill
	// The page agrees with the server on the steady locks and their queues.
	p.waitJS(`document.querySelector('tr[data-lock="deploy/web"] td:last-child').textContent === "3"`, time.Second, "3 waiters on deploy/web")
	p.waitJS(`document.querySelectorAll('#locks-body tr[data-lock]').length >= 9`, time.Second, "every steady lock listed")
	p.waitJS(`document.querySelector('tr[data-lock="render/gpus"] td.slots').textContent === "3 / 3"`, time.Second, "the semaphore's slots")
	p.screenshot("dashboard.png", true)
	// Sorting by waiters puts deploy/web first.
	p.do("sort by waiters", chromedp.Click(chromedp.CSS(`th[data-key="waiters"] button`)), chromedp.Click(chromedp.CSS(`th[data-key="waiters"] button`)))
	p.waitJS(`document.querySelector('#locks-body tr').dataset.lock === "deploy/web"`, time.Second, "sorted by waiters, descending")
	// Filtering by prefix.
	p.do("filter", chromedp.SendKeys(chromedp.CSS("#filter"), "deploy/"))
	p.waitJS(`[...document.querySelectorAll('#locks-body tr')].every(r => r.dataset.lock.startsWith("deploy/")) && document.querySelectorAll('#locks-body tr').length === 2`, time.Second, "filtered to deploy/")
	// A lock's page opened now shows what happened before it: the history
	// event at the stream's start fills it.
	p.do("fresh page on a churned lock", chromedp.Navigate(hs.URL+"/?fresh=1#/lock/jobs%2Fshard-0"))
	p.waitJS(`document.querySelectorAll("#history li").length > 3 && !!document.querySelector("#hold-chart svg")`, 5*time.Second, "history and hold chart from before the page opened")
	// And the server's own per-lock histograms (baton_hold_seconds and
	// baton_wait_seconds with lock="jobs/shard-0", from /metrics).
	p.waitJS(`!!document.querySelector("#hold-hist svg") && !!document.querySelector("#wait-hist svg") && document.getElementById("hold-hist").textContent.includes("baton_hold_seconds")`, 5*time.Second, "per-lock histograms from /metrics")
	p.do("server page", chromedp.Navigate(hs.URL+"/#/server"), chromedp.WaitVisible(chromedp.CSS("#stats .stat")))
	p.waitJS(`Number(document.querySelector("#stats .stat b").textContent) >= 6`, 5*time.Second, "sessions holding from /metrics")
	p.waitJS(`document.getElementById("cluster").textContent.includes("Standalone")`, 5*time.Second, "cluster: standalone")
	p.expectNoConsoleErrors()
}
