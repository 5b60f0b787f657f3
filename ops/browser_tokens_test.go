package ops_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/batonlock/baton/ops"
)

// TestBrowserTokensKeepEveryBit: past 2^53 the dashboard shows each
// token exactly as the server granted it (JSON.parse of the number would
// round it to a token never granted), its epoch and grant, in the table,
// on the lock's page (one holder and several) and in the history. At the
// epoch 2^23+1 (its tokens are past 2^63) and at the last one (2^24-1).
func TestBrowserTokensKeepEveryBit(t *testing.T) {
	for _, epoch := range []uint64{1<<23 + 1, 1<<24 - 1} {
		t.Run(fmt.Sprint("epoch ", epoch), func(t *testing.T) {
			base := epoch << 40
			ts, hs := startEvents(t, ops.Config{}, nil, highTokens(base))
			p := openBrowser(t)
			p.do("open the dashboard", chromedp.Navigate(hs.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#locks-table")))
			p.waitJS(`document.getElementById("live").textContent === "live"`, 5*time.Second, "stream connected")

			a := holdWith(t, ts.Addr, "tok/a", "alice")
			sharedClaim(t, ts, "tok/sem", 2, "r1")
			sharedClaim(t, ts, "tok/sem", 2, "r2")
			want := func(n uint64) string { return strconv.FormatUint(base+n, 10) }
			if got := strconv.FormatUint(a.Token(), 10); got != want(1) {
				t.Fatalf("the client's token %s, want %s", got, want(1))
			}

			cell := `document.querySelector('tr[data-lock="tok/a"] td.num.opt')`
			p.waitJS(`!!`+cell, 5*time.Second, "the lock's row")
			if got := p.eval(cell + `.textContent`); got != want(1) {
				t.Errorf("token in the table %q, want %s", got, want(1))
			}
			if got, w := p.eval(cell+`.title`), fmt.Sprintf("epoch %d, grant 1", epoch); got != w {
				t.Errorf("token's title in the table %q, want %q", got, w)
			}

			p.do("the lock's page", chromedp.Navigate(hs.URL+"/#/lock/tok%2Fa"), chromedp.WaitVisible(chromedp.CSS("#token-parts")))
			if got := p.eval(`document.querySelector("#holder dl dd:nth-of-type(4)").textContent`); got != want(1) {
				t.Errorf("token on the lock's page %q, want %s", got, want(1))
			}
			if got, w := p.eval(`document.getElementById("token-parts").textContent`), fmt.Sprintf("epoch %d · grant 1", epoch); got != w {
				t.Errorf("token's parts %q, want %q", got, w)
			}
			p.waitJS(`document.getElementById("history").textContent.includes("token `+want(1)+`")`, 5*time.Second, "the exact token in the history")

			p.do("the semaphore's page", chromedp.Navigate(hs.URL+"/#/lock/tok%2Fsem"), chromedp.WaitVisible(chromedp.CSS("#holders-body")))
			p.waitJS(`document.querySelectorAll("#holders-body tr").length === 2`, 5*time.Second, "two holders")
			if got, w := p.eval(`[...document.querySelectorAll("#holders-body tr td:nth-child(3)")].map(td => td.textContent).join(",")`), want(2)+","+want(3); got != w {
				t.Errorf("the holders' tokens %q, want %q", got, w)
			}
			p.expectNoConsoleErrors()
		})
	}
}
