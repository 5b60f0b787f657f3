package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/clients/go/wire"
)

// TestBrowserGraceAndServerPage opens the dashboard of a real server that
// restarted after kill -9 while a lock was held: the locks page says when
// grants resume, the Server page says "loading…" until /v1/cluster has
// answered (never "Standalone" before it knows), then the crash grace, and
// shows the lock protocol's whole address within its box.
func TestBrowserGraceAndServerPage(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing in CI: .ci/dash.sh must install chromium (%v)", chromiumPath, err)
		}
		t.Skipf("SKIPPED: browser test needs %s", chromiumPath)
	}
	t.Parallel()
	const lease = 20 * time.Second
	dataDir := t.TempDir()
	cmd, addr := startServeBinary(t, dataDir)
	if _, typ := acquireConn(t, addr, "deploy/web", lease); typ != wire.TypeAcquired {
		t.Fatalf("first run: got %v, want ACQUIRED", typ)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	serve := batonCmd(t, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-shutdown-linger=0s",
		"-data-dir="+dataDir, "-log-format=json")
	sl := waitServing(t, startLogged(t, serve).next)

	// A waiter, which the grace keeps waiting with no holder.
	c, err := baton.New([]string{sl.Addr}, baton.WithOwner("waiter@build-3"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		if l, err := c.Acquire(ctx, "deploy/web"); err == nil {
			l.Release()
		}
	}()
	defer func() { cancel(); <-waited }()

	base, openCluster := gatedPathProxy(t, sl.OpsAddr, "/v1/cluster")
	b := openCLIBrowser(t)
	b.run("the server page", chromedp.Navigate(base+"/#/server"), chromedp.WaitVisible(chromedp.CSS("#stats .stat")))
	if got := b.eval(`document.getElementById("cluster").textContent`); got != "loading…" {
		t.Errorf("the Server page's cluster box before /v1/cluster answered: %q, want \"loading…\"", got)
	}
	openCluster()
	b.wait(`document.getElementById("cluster").textContent.startsWith("Standalone server")`, 10*time.Second, "the standalone box")
	if got := b.eval(`document.getElementById("cluster").textContent`); !strings.Contains(got, "Crash grace: ") {
		t.Errorf("the cluster box during the crash grace: %q, want its time left", got)
	}
	b.wait(`[...document.querySelectorAll("#stats .stat")].some(s => s.textContent.includes("Lock protocol"))`, 10*time.Second, "the lock protocol's address")
	fit := b.eval(`(() => { const s = [...document.querySelectorAll("#stats .stat")].find(s => s.textContent.includes("Lock protocol"));
		const v = s.querySelector("b"), box = s.getBoundingClientRect(), r = document.createRange(); r.selectNodeContents(v);
		const t = r.getBoundingClientRect();
		return JSON.stringify({text: v.textContent, fits: v.scrollWidth <= v.clientWidth && t.right <= box.right && t.left >= box.left}); })()`)
	if want := `{"text":"` + sl.Addr + `","fits":true}`; fit != want {
		t.Errorf("the lock protocol's stat: %s, want %s (the whole address within its box)", fit, want)
	}
	b.screenshot(filepath.Join(shotDir(t), "dashboard-server-grace.png"))

	b.run("the locks page", chromedp.Navigate(base+"/#/"), chromedp.WaitVisible(chromedp.CSS("#view-locks")))
	b.wait(`!document.getElementById("grace").hidden && /^grace: grants resume in \d/.test(document.getElementById("grace").textContent)`,
		10*time.Second, "the grace banner on the locks page")
	b.screenshot(filepath.Join(shotDir(t), "dashboard-grace.png"))
	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}
