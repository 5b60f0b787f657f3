package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// memberState is a member's health in GET /v1/cluster: "healthy",
// "unreachable", "unhealthy" or "" (not known there).
func memberState(t *testing.T, opsAddr, query, id string) string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + opsAddr + "/v1/cluster" + query)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var v struct {
		Members []struct {
			ID     string
			Role   string
			Health *struct {
				Reachable, Healthy bool
			}
		}
	}
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return ""
	}
	for _, m := range v.Members {
		switch {
		case m.ID != id || m.Health == nil:
		case m.Health.Healthy:
			return "healthy"
		case !m.Health.Reachable:
			return "unreachable"
		default:
			return "unhealthy"
		}
	}
	return ""
}

// metricLine is the line of /metrics on opsAddr that starts with prefix.
func metricLine(opsAddr, prefix string) string {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + opsAddr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// until polls cond every 50 ms for within, and fails with what.
func until(t *testing.T, within time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBinaryMemberHealth: after kill -9 of a follower, the leader reports
// it unreachable within a few seconds in GET /v1/cluster (also asked
// through the other follower with ?view=leader), in `baton cluster` and in
// /metrics, logs it once, and healthy again once it is back.
func TestBinaryMemberHealth(t *testing.T) {
	t.Parallel()
	procs, peers := clusterLayout(t)
	for _, p := range procs {
		p.start(t, peers)
	}
	l := waitLeader(t, procs)
	var down, other *clusterProc
	for _, p := range procs {
		switch {
		case p == l:
		case down == nil:
			down = p
		default:
			other = p
		}
	}
	until(t, 10*time.Second, func() bool { return memberState(t, l.opsAddr, "", down.id) == "healthy" }, down.id+" healthy at first")
	down.cmd.Process.Signal(syscall.SIGKILL)
	<-down.log.waited
	down.log.waited <- nil
	killed := time.Now()
	until(t, 10*time.Second, func() bool { return memberState(t, l.opsAddr, "", down.id) == "unreachable" }, down.id+" unreachable on the leader")
	t.Logf("kill -9 of %s to unreachable on the leader: %v", down.id, time.Since(killed).Round(time.Millisecond))
	until(t, 5*time.Second, func() bool { return memberState(t, other.opsAddr, "?view=leader", down.id) == "unreachable" }, "the same through a follower")
	if s := memberState(t, other.opsAddr, "", down.id); s != "" {
		t.Errorf("a follower's own view reports health %q; only the leader knows it", s)
	}
	until(t, 5*time.Second, func() bool {
		return strings.HasSuffix(metricLine(l.opsAddr, `baton_cluster_member_healthy{member="`+down.id+`"}`), " 0") &&
			strings.HasSuffix(metricLine(l.opsAddr, "baton_cluster_healthy "), " 0") &&
			strings.HasSuffix(metricLine(l.opsAddr, "baton_cluster_voters_healthy "), " 2")
	}, "the metrics")
	exported := exportedMetrics(t, l.opsAddr)
	for n, panel := range grafanaMetrics(t) {
		if strings.HasPrefix(n, "baton_cluster_") && !exported[n] {
			t.Errorf("the Grafana panel %q queries %s, which the leader does not export", panel, n)
		}
	}
	var out bytes.Buffer
	cmd := batonCmd(t, "cluster", "-ops-addr", other.opsAddr)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("baton cluster: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "cluster UNHEALTHY: 2 of 3 voters healthy") || !strings.Contains(out.String(), "UNREACHABLE") {
		t.Errorf("baton cluster on a follower:\n%s", out.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 3 && (f[0] == "n1" || f[0] == "n2" || f[0] == "n3") && f[3] == "" {
			t.Errorf("member line without a role: %q", line)
		}
	}

	down.rejoin(t, peers) // on new ports if its old ones were taken meanwhile
	until(t, 15*time.Second, func() bool { return memberState(t, l.opsAddr, "", down.id) == "healthy" }, down.id+" healthy again after its restart")
	var unreachable int
	for _, s := range l.log.seen {
		if strings.Contains(s, `"msg":"cluster member unreachable"`) {
			unreachable++
		}
	}
	drainNow(l.log)
	for _, s := range l.log.seen {
		if strings.Contains(s, `"msg":"cluster member unreachable"`) {
			unreachable++
		}
	}
	if unreachable != 1 {
		t.Errorf("the leader logged %d 'cluster member unreachable' lines for one kill, want 1", unreachable)
	}
}

// drainNow reads the log lines already written, without waiting for more.
func drainNow(l *loggedCmd) {
	for {
		select {
		case s, ok := <-l.lines:
			if !ok {
				return
			}
			l.seen = append(l.seen, s)
		default:
			return
		}
	}
}

// TestBrowserClusterHealth: the dashboard's cluster panel, on the leader
// and on a follower (which asks the leader), marks a member that is down
// in red with its last contact, and says the cluster is unhealthy.
// BATON_UPDATE_SCREENSHOT=1 writes docs/cluster-unhealthy.png.
func TestBrowserClusterHealth(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing in CI: .ci/dash.sh must install chromium (%v)", chromiumPath, err)
		}
		t.Skipf("SKIPPED: browser test needs %s", chromiumPath)
	}
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	procs, peers := clusterLayout(t)
	for _, p := range procs {
		p.start(t, peers)
	}
	l := waitLeader(t, procs)
	var down, other *clusterProc
	for _, p := range procs {
		switch {
		case p == l:
		case down == nil:
			down = p
		default:
			other = p
		}
	}
	until(t, 10*time.Second, func() bool { return memberState(t, l.opsAddr, "", down.id) == "healthy" }, "healthy at first")
	b := openCLIBrowser(t)
	row := `document.querySelector('#members tr[data-member="` + down.id + `"]')`
	for _, at := range []*clusterProc{l, other} {
		b.run("server page on "+at.id, chromedp.Navigate("http://"+at.opsAddr+"/#/server"), chromedp.WaitVisible(chromedp.CSS("#members")))
		b.wait(`!!`+row+` && !`+row+`.classList.contains("bad") && `+row+`.textContent.includes("healthy")`, 10*time.Second, "healthy member on "+at.id)
	}
	down.cmd.Process.Signal(syscall.SIGKILL)
	<-down.log.waited
	down.log.waited <- nil
	for _, at := range []*clusterProc{other, l} {
		b.run("server page on "+at.id, chromedp.Navigate("http://"+at.opsAddr+"/#/server"), chromedp.WaitVisible(chromedp.CSS("#members")))
		b.wait(row+`.classList.contains("bad") && `+row+`.textContent.includes("unreachable") && `+row+`.textContent.includes(" ago")`, 15*time.Second, "unreachable member in red with its last contact on "+at.id)
		b.wait(`document.getElementById("cluster-health").textContent.includes("UNHEALTHY")`, 5*time.Second, "the cluster said unhealthy on "+at.id)
		if roles := b.eval(`[...document.querySelectorAll("#members tbody tr td:nth-child(2)")].map((td) => td.textContent).join(",")`); strings.Contains(roles, ",,") || strings.HasPrefix(roles, ",") || strings.HasSuffix(roles, ",") {
			t.Errorf("a member without a role on %s: %q", at.id, roles)
		}
	}
	b.wait(row+`.querySelector("td:nth-child(6)").textContent.endsWith(" s")`, 10*time.Second, "down for a second or more (for the screenshot)")
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if os.Getenv("BATON_UPDATE_SCREENSHOT") == "1" {
		dir = "../../docs"
	}
	if err := os.WriteFile(filepath.Join(dir, "cluster-unhealthy.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	down.rejoin(t, peers) // on new ports if its old ones were taken meanwhile
	b.wait(`!`+row+`.classList.contains("bad") && `+row+`.textContent.includes("healthy")`, 20*time.Second, "healthy again after the restart")
	for _, e := range b.consoleErrors() {
		t.Errorf("console error: %s", e)
	}
}
