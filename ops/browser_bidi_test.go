package ops_test

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/chromedp/chromedp"

	"github.com/batonlock/baton/internal/hidden"
	"github.com/batonlock/baton/ops"
)

// TestBrowserShowsBidiControls: a right-to-left override (U+202E) in a
// lock name or an owner text would make the page show the rest of it
// reversed ("invoice" + U+202E + "fdp.exe" reads "invoiceexe.pdf"); the
// dashboard shows such controls escaped, in the table, on the lock's page
// and in its dialogs (a semaphore's holders too), and never renders the
// control itself.
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

	// A semaphore's holders: the holders' table, the list's extra rows and
	// one holder's own dialog escape them too.
	for _, o := range []string{"eve\u202e@gpu-1", "eve\u2067@gpu-2"} {
		claimV2(t, ts, "gpu/pool", o, true, 3).expectGranted(t)
	}
	p.do("open the semaphore's page", chromedp.Navigate(hs.URL+"/#/lock/gpu%2Fpool"))
	p.waitJS(`document.querySelectorAll("#holders-body tr").length === 2`, 3*time.Second, "the semaphore's 2 holders")
	if got := p.eval(`document.getElementById("holders-body").textContent`); !strings.Contains(got, `eve\u202E@gpu-1`) ||
		!strings.Contains(got, `eve\u2067@gpu-2`) || strings.ContainsAny(got, "\u202e\u2067") {
		t.Fatalf("holders' table %q: want both owners shown escaped, no raw bidi control", got)
	}
	p.do("open one holder's dialog", chromedp.Click(chromedp.CSS("#holders-body button.release-one")), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")))
	if got := p.eval(`document.getElementById("confirm-text").textContent`); !strings.Contains(got, `eve\u202E@gpu-1`) || strings.ContainsAny(got, "\u202e\u2067") {
		t.Fatalf("one holder's dialog %q: want the owner escaped, no raw bidi control", got)
	}
	p.do("cancel one holder's release", chromedp.Click(chromedp.CSS(`#confirm button[value="cancel"]`)))
	p.do("back to the list", chromedp.Navigate(hs.URL+"/#/"))
	p.waitJS(`!!document.querySelector('tr[data-holder-of="gpu/pool"]')`, 3*time.Second, "the semaphore's second row in the list")
	if got := p.eval(`document.querySelector('tr[data-holder-of="gpu/pool"]').textContent`); !strings.Contains(got, `eve\u2067@gpu-2`) || strings.ContainsAny(got, "\u2067") {
		t.Fatalf("the list's row of the second holder %q: want the owner escaped", got)
	}
	p.expectNoConsoleErrors()
}

// TestBrowserShowsInvisibleCharacters: names that look the same. Each of
// the invisible and format characters a review found shown raw (zero-width
// ones, the word joiner, the BOM, the soft hyphen, the grapheme joiner, a
// Hangul filler, a tag, a variation selector), and a space that is not
// U+0020, is shown escaped in the table, on the lock's page and in its
// dialog, each in a marked box, exactly as the operator commands print it
// (one rule: internal/hidden).
func TestBrowserShowsInvisibleCharacters(t *testing.T) {
	ts, hs := startEvents(t, ops.Config{}, nil)
	const name = "jobs/\u200b\u200c\u200d\u2060\ufeff\u00ad\u034f\u3164\U000E0041\ufe0fx"
	const owner = "ci\u00a0runner\u200b-1"
	holdWith(t, ts.Addr, name, owner)
	p := openBrowser(t)
	p.do("open the dashboard", chromedp.Navigate(hs.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#locks-table")))
	row := `document.querySelector('tr[data-lock="` + strings.ReplaceAll(name, `"`, `\"`) + `"]')`
	p.waitJS(`!!`+row, 5*time.Second, "the lock's row")
	text := p.eval(row + `.textContent`)
	if i := strings.IndexFunc(text, hidden.Rune); i >= 0 {
		r, _ := utf8.DecodeRuneInString(text[i:])
		t.Errorf("row text %q holds U+%04X raw", text, r)
	}
	for _, want := range []string{hidden.Escape(name), hidden.Escape(owner),
		`jobs/\u200B\u200C\u200D\u2060\uFEFF\u00AD\u034F\u3164\U000E0041\uFE0Fx`} {
		if !strings.Contains(text, want) {
			t.Errorf("row text %q: want %q, as the operator commands print it", text, want)
		}
	}
	if n, want := p.eval(`String(`+row+`.querySelectorAll(".esc").length)`), "12"; n != want {
		t.Errorf("%s escapes marked in the row, want %s (one per hidden character)", n, want)
	}
	p.do("open the lock's page", chromedp.Navigate(hs.URL+"/#/lock/"+url.PathEscape(name)))
	p.waitJS(`document.getElementById("lock-title").textContent === `+strconv.Quote(hidden.Escape(name)), 3*time.Second, "the escaped title")
	p.do("open the force-release dialog", chromedp.Click(chromedp.CSS("#force-release")), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")))
	for _, id := range []string{"confirm-title", "confirm-text"} {
		got := p.eval(`document.getElementById("` + id + `").textContent`)
		if hidden.Has(got) {
			t.Errorf("#%s %q holds a hidden character raw", id, got)
		}
	}
	p.do("cancel", chromedp.Click(chromedp.CSS(`#confirm button[value="cancel"]`)))
	p.expectNoConsoleErrors()
}
