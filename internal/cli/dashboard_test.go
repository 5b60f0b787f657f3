package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	baton "github.com/batonlock/baton/clients/go"
)

// gatedProxy serves the ops API at target through a proxy that holds the
// event stream back until open is called: the page stays in the state it
// is in before its first snapshot for as long as the test looks at it.
func gatedProxy(t *testing.T, target string) (base string, open func()) {
	t.Helper()
	return gatedPathProxy(t, target, "/v1/events")
}

// gatedPathProxy is gatedProxy holding back the requests for path.
func gatedPathProxy(t *testing.T, target, path string) (base string, open func()) {
	t.Helper()
	u, err := url.Parse("http://" + target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // the event stream, as it comes
	gate := make(chan struct{})
	var once sync.Once
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == path {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	open = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(func() { open(); hs.Close() })
	return hs.URL, open
}

// TestBrowserDashboardLoadAndServer opens the dashboard of the real binary
// while locks are held: before the first snapshot it says "loading…" and
// never "No lock is held"; then it shows the locks, the server's address,
// version and uptime, the token's two parts explained, and charts with
// named axes.
func TestBrowserDashboardLoadAndServer(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing in CI: .ci/dash.sh must install chromium (%v)", chromiumPath, err)
		}
		t.Skipf("SKIPPED: browser test needs %s", chromiumPath)
	}
	t.Parallel()
	sl := serveBinaryLine(t)
	out, err := batonCmd(t, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	ver := strings.Fields(string(out))[1] // baton VERSION (commit ...) ...

	client := func(owner string) *baton.Client {
		c, err := baton.New([]string{sl.Addr}, baton.WithOwner(owner), baton.WithLease(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// History for the charts: a holder that ends, a waiter promoted after
	// it, who ends too; then the holder the page will show.
	early, err := client("early@build-0").Acquire(ctx, "deploy/web")
	if err != nil {
		t.Fatal(err)
	}
	promoted := make(chan error, 1)
	go func() {
		l, err := client("bob@build-2").Acquire(ctx, "deploy/web")
		if err == nil {
			time.Sleep(100 * time.Millisecond)
			l.Release()
		}
		promoted <- err
	}()
	time.Sleep(300 * time.Millisecond) // bob queues; early holds a while
	early.Release()
	if err := <-promoted; err != nil {
		t.Fatalf("bob: %v", err)
	}
	held, err := client("alice@build-1").Acquire(ctx, "deploy/web")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()

	base, openStream := gatedProxy(t, sl.OpsAddr)
	b := openCLIBrowser(t)
	b.run("open the dashboard", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#view-locks")))
	// Before the first snapshot: loading, and no claim that nothing is held.
	b.wait(`!document.getElementById("locks-loading").hidden`, 5*time.Second, "the loading line")
	state := b.eval(`JSON.stringify({loading: document.getElementById("locks-loading").textContent,
		empty: !document.getElementById("locks-empty").hidden, text: document.body.innerText})`)
	if !strings.Contains(state, `"loading":"loading…"`) || strings.Contains(state, `"empty":true`) || strings.Contains(state, "No lock is held") {
		t.Errorf("before the first snapshot the page shows %s; want loading… and no \"No lock is held\"", state)
	}
	b.screenshot(filepath.Join(shotDir(t), "dashboard-loading.png"))
	// From here to the lock's row, "No lock is held" must never show.
	b.eval(`window.sawEmpty = false; new MutationObserver(() => {
		if (!document.getElementById("locks-empty").hidden) window.sawEmpty = true;
	}).observe(document.getElementById("main"), {subtree: true, attributes: true, childList: true}), ""`)
	openStream()
	b.wait(`!!document.querySelector('tr[data-lock="deploy/web"]') && document.querySelector('tr[data-lock="deploy/web"]').textContent.includes("alice@build-1")`,
		10*time.Second, "alice's lock after the snapshot")
	if b.eval(`String(window.sawEmpty)`) != "false" {
		t.Error(`the page said "No lock is held" while deploy/web was held`)
	}
	if b.visible("#locks-loading") {
		t.Error("the loading line is still shown after the snapshot")
	}

	// The server itself: address, version and uptime in the header.
	b.wait(fmt.Sprintf(`document.getElementById("server-info").textContent.startsWith(%q) && /· up \d/.test(document.getElementById("server-info").textContent)`,
		sl.Addr+" · baton "+ver), 10*time.Second, "address, version and uptime in the header")

	// The token's two parts, explained where it is shown.
	tok := held.Token()
	b.run("the lock's page", chromedp.Navigate(base+"/#/lock/deploy%2Fweb"), chromedp.WaitVisible(chromedp.CSS("#force-release")))
	if got, want := b.eval(`document.getElementById("token-parts").textContent`), fmt.Sprintf("epoch %d · grant %d", tok>>40, tok&(1<<40-1)); got != want {
		t.Errorf("token parts %q, want %q (token %d)", got, want, tok)
	}
	if got := b.eval(`document.getElementById("holder").textContent`); !strings.Contains(got, "epoch × 2^40 + grant") {
		t.Errorf("the holder card does not explain the token: %q", got)
	}
	// The charts name their axes.
	b.wait(`!!document.querySelector("#hold-chart svg") && !!document.querySelector("#wait-chart svg")`, 10*time.Second, "hold and wait charts")
	for chart, want := range map[string]string{
		"hold-chart": "held for|holders that ended, oldest → newest",
		"wait-chart": "waited|promoted waiters, oldest → newest",
	} {
		if got := b.eval(fmt.Sprintf(`[...document.querySelectorAll("#%s svg text.axis-label")].map(e => e.textContent).join("|")`, chart)); got != want {
			t.Errorf("%s axis labels %q, want %q", chart, got, want)
		}
	}
	b.fullScreenshot(filepath.Join(shotDir(t), "dashboard-lock.png"))
	b.run("the server page", chromedp.Navigate(base+"/#/server"), chromedp.WaitVisible(chromedp.CSS("#stats .stat")))
	b.wait(fmt.Sprintf(`document.getElementById("stats").textContent.includes("Version"+%q) && document.getElementById("stats").textContent.includes("Lock protocol"+%q)`, ver, sl.Addr),
		10*time.Second, "version and address on the server page")
	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}

// visible reports whether the element sel is shown.
func (b *cliBrowser) visible(sel string) bool {
	return b.eval(fmt.Sprintf(`String(!!document.querySelector(%q) && !document.querySelector(%q).hidden)`, sel, sel)) == "true"
}

// screenshot writes a PNG of the viewport to file.
func (b *cliBrowser) screenshot(file string) {
	b.t.Helper()
	b.shoot(file, chromedp.CaptureScreenshot())
}

// fullScreenshot writes a PNG of the whole page to file.
func (b *cliBrowser) fullScreenshot(file string) {
	b.t.Helper()
	b.shoot(file, chromedp.FullScreenshot(100))
}

func (b *cliBrowser) shoot(file string, shot chromedp.Action[[]byte]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, shot)
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(file, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("wrote %s", file)
}

// shotDir is where screenshots go: $BATON_SCREENSHOT_DIR to look at them,
// else the test's temporary directory.
func shotDir(t *testing.T) string {
	if d := os.Getenv("BATON_SCREENSHOT_DIR"); d != "" {
		return d
	}
	return t.TempDir()
}
