package ops_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/batonlock/baton/ops"
)

// TestBrowserShowsBidiControls: a right-to-left override (U+202E) in a
// lock name or an owner text would make the page show the rest of it
// reversed ("invoice" + U+202E + "fdp.exe" reads "invoiceexe.pdf"); the
// dashboard shows such controls escaped, in the table, on the lock's page
// and in its dialogs, and never renders the control itself.
func TestBrowserShowsBidiControls(t *testing.T) {
	ts, hs := startEvents(t, ops.Config{}, nil)
	const name, owner = "invoice\u202efdp.exe", "bob\u2066@\u2069host"
	holdWith(t, ts.Addr, name, owner)
	p := openBrowser(t)
	p.do("open the dashboard", chromedp.Navigate(hs.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#locks-table")))
	const row = `document.querySelector('tr[data-lock="invoice\u202efdp.exe"]')`
	p.waitJS(`!!`+row, 5*time.Second, "the lock's row")
	// The row's text: escapes in place of the controls, none of them raw.
	if got, want := p.eval(row+`.textContent`), `invoice\u202Efdp.exe`; !strings.Contains(got, want) || strings.ContainsAny(got, "\u202e\u2066\u2069") {
		t.Fatalf("row text %q: want %q shown, and no raw bidi control", got, want)
	}
	if got, want := p.eval(row+`.textContent`), `bob\u2066@\u2069host`; !strings.Contains(got, want) {
		t.Fatalf("row text %q: want the owner shown as %q", got, want)
	}
	if n := p.eval(`String(` + row + `.querySelectorAll(".esc").length)`); n != "3" {
		t.Fatalf("%s escapes marked in the row, want 3 (one per control)", n)
	}
	p.do("open the lock's page", chromedp.Click(chromedp.CSS(`tr[data-lock="invoice`+"\u202e"+`fdp.exe"] a`)))
	p.waitJS(`document.getElementById("lock-title").textContent === "invoice\\u202Efdp.exe"`, 2*time.Second, "escaped title")
	p.do("open the force-release dialog", chromedp.Click(chromedp.CSS("#force-release")), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")))
	for _, id := range []string{"confirm-title", "confirm-text"} {
		if got := p.eval(`document.getElementById("` + id + `").textContent`); strings.ContainsAny(got, "\u202e\u2066\u2069") {
			t.Fatalf("#%s %q holds a raw bidi control", id, got)
		}
	}
	p.do("cancel", chromedp.Click(chromedp.CSS(`#confirm button[value="cancel"]`)))
	p.expectNoConsoleErrors()
}
