package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
)

// TestGrafanaDashboardMetricsExist: every metric that a query of
// deploy/grafana/baton.json names is exported by /metrics of a real baton
// serve, once a lock has been waited for, held and released (so the
// per-lock histograms have series). A renamed metric fails here instead of
// leaving an empty panel in production. The cluster's metrics
// (baton_cluster_*) are checked against a cluster's leader in
// TestBinaryMemberHealth (grafanaClusterMetrics).
func TestGrafanaDashboardMetricsExist(t *testing.T) {
	t.Parallel()
	queried := map[string]string{}
	for n, panel := range grafanaMetrics(t) {
		if !strings.HasPrefix(n, "baton_cluster_") {
			queried[n] = panel
		}
	}

	cmd := batonCmd(t, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-shutdown-linger=0s")
	cmd.Env = append(cmd.Env, "BATON_LOG_FORMAT=json")
	l := startLogged(t, cmd)
	sl := waitServing(t, l.next)
	t.Cleanup(func() { cmd.Process.Kill(); l.drain(t) })

	// A holder, a second claim on the same name, and two releases.
	c, err := baton.New([]string{sl.Addr}, baton.WithLease(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := c.Acquire(ctx, "grafana/test")
	if err != nil {
		t.Fatal(err)
	}
	second := make(chan *baton.Lock, 1)
	go func() {
		l, err := c.Acquire(ctx, "grafana/test", baton.WithQueueBehindSelf(true))
		if err != nil {
			t.Errorf("second Acquire: %v", err)
		}
		second <- l
	}()
	// Queued before this release or granted after it: either way every
	// series below exists once both have held and released.
	first.Release()
	if l := <-second; l != nil {
		l.Release()
	}

	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + sl.OpsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	exported := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "baton_") {
			name := line[:strings.IndexAny(line, "{ ")]
			exported[name] = true
		}
	}
	var missing []string
	for n, panel := range queried {
		if !exported[n] {
			missing = append(missing, n+" (in "+panel+")")
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("the dashboard queries metrics that /metrics does not export:\n  %s", strings.Join(missing, "\n  "))
	}
	if len(queried) < 8 {
		t.Errorf("the dashboard queries only %d metrics (%v), want sessions, grants, wait, hold, expiries, force-releases...", len(queried), queried)
	}
}

// grafanaMetrics is every baton metric a query of deploy/grafana/baton.json
// names, with a panel that queries it.
func grafanaMetrics(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "baton.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("deploy/grafana/baton.json: %v", err)
	}
	metricRE := regexp.MustCompile(`\bbaton_[a-z_]+`)
	queried := map[string]string{} // metric -> a panel that queries it
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			names := metricRE.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no baton metric", p.Title, tg.Expr)
			}
			for _, n := range names {
				queried[n] = p.Title
			}
		}
	}
	for _, v := range dash.Templating.List {
		for _, n := range metricRE.FindAllString(v.Definition, -1) {
			queried[n] = "variable " + v.Definition
		}
	}

	return queried
}

// exportedMetrics is the set of metric names /metrics of opsAddr exports.
func exportedMetrics(t *testing.T, opsAddr string) map[string]bool {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + opsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	exported := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "baton_") {
			exported[line[:strings.IndexAny(line, "{ ")]] = true
		}
	}
	return exported
}
