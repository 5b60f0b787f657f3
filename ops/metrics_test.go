package ops

import (
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// countingGatherer counts its Gathers.
type countingGatherer struct {
	prometheus.Gatherer
	n atomic.Int64
}

func (g *countingGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.n.Add(1)
	return g.Gatherer.Gather()
}

func metricsRegistry(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_test_total", Help: "test"})
	c.Add(7)
	reg.MustRegister(c)
	return reg
}

// TestMetricsScrapesShareAGathering: past freshGathers a second (twice as
// many at once), scrapes within MetricsMaxAge of the last gathering are
// answered with its bytes, whoever asks: a flood of scrapes costs a few
// gatherings a second. A few scrapes in a row get fresh figures; once
// MetricsMaxAge has passed, the next scrape gathers again; each format is
// answered in its own.
func TestMetricsScrapesShareAGathering(t *testing.T) {
	g := &countingGatherer{Gatherer: metricsRegistry(t)}
	m := newMetricsHandler(g, time.Second, slog.New(slog.DiscardHandler))
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	scrape := func(accept, encoding string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/metrics", nil)
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		if encoding != "" {
			r.Header.Set("Accept-Encoding", encoding)
		}
		w := httptest.NewRecorder()
		m.ServeHTTP(w, r)
		return w
	}
	scrape("", "")
	scrape("", "")
	if n := g.n.Load(); n != 2 {
		t.Errorf("two scrapes in a row gathered %d times, want 2 (fresh figures for a reader that asks twice)", n)
	}
	for range 500 {
		if w := scrape("", ""); w.Code != 200 || !strings.Contains(w.Body.String(), "baton_test_total 7") {
			t.Fatalf("scrape: %d %q", w.Code, w.Body.String())
		}
	}
	if n, most := g.n.Load(), int64(1+2*freshGathers); n > most {
		t.Errorf("502 scrapes within a second gathered %d times, want at most %d", n, most)
	}
	if w := scrape("", "gzip"); w.Header().Get("Content-Encoding") != "gzip" || w.Code != 200 {
		t.Errorf("a scrape asking for gzip: %d, Content-Encoding %q", w.Code, w.Header().Get("Content-Encoding"))
	}
	if w := scrape("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited", ""); !strings.Contains(w.Header().Get("Content-Type"), "protobuf") {
		t.Errorf("a scrape asking for protobuf got Content-Type %q", w.Header().Get("Content-Type"))
	}
	now = now.Add(time.Second)
	scrape("", "")
	if n := g.n.Load(); n < 2 {
		t.Errorf("a scrape a second later gathered %d times in all, want a new gathering", n)
	}
}
