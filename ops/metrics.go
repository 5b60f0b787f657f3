package ops

import (
	"bytes"
	"compress/gzip"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/time/rate"

	"github.com/batonlock/baton/server"
)

// /metrics is open to whoever reaches the ops listener, so what a scrape
// costs is paid for anyone's: gathering every collector and encoding the
// text costs about a millisecond and a half of CPU, and a few hundred
// scrapes a second from anywhere would take a share of a CPU from the lock
// sessions. So scrapes gather anew at most freshGathers a second (twice
// as many at once); past that, a scrape within MetricsMaxAge of the last
// gathering is answered with the bytes it made (per format and
// compression), and scrapes that arrive together wait for one gathering.
// A scraper, or a tool that reads a figure after an action, gets fresh
// figures; a flood gets figures at most MetricsMaxAge old.
//
// What the scrape fails to write is the caller's affair (it went away):
// nothing is logged for it. Collectors' errors are logged, rate-limited.

// DefaultMetricsMaxAge is the MetricsMaxAge of baton serve.
const DefaultMetricsMaxAge = time.Second

// freshGathers is how many scrapes a second gather anew within
// MetricsMaxAge of the last gathering.
const freshGathers = 4

// metricsHandler serves /metrics from g, cached for maxAge.
type metricsHandler struct {
	g      prometheus.Gatherer
	maxAge time.Duration
	now    func() time.Time
	log    *slog.Logger
	errs   *server.RefusalLog
	fresh  *rate.Limiter // gatherings within maxAge of the last

	mu      sync.Mutex // held while a scrape is gathered: the others wait for it
	at      time.Time  // when cached was gathered
	cached  map[metricsKey][]byte
	gathers int // how many times g was gathered (tests)
}

type metricsKey struct {
	format expfmt.Format
	gzip   bool
}

func newMetricsHandler(g prometheus.Gatherer, maxAge time.Duration, log *slog.Logger) *metricsHandler {
	return &metricsHandler{g: g, maxAge: maxAge, now: time.Now, log: log, errs: server.NewRefusalLog(), cached: map[metricsKey][]byte{},
		fresh: rate.NewLimiter(freshGathers, 2*freshGathers)}
}

func (m *metricsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := metricsKey{format: expfmt.Negotiate(r.Header), gzip: acceptsGzip(r)}
	body, err := m.body(key)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "gathering the metrics failed: "+err.Error())
		return
	}
	h := w.Header()
	h.Set("Content-Type", string(key.format))
	h.Set("Cache-Control", "no-store")
	if key.gzip {
		h.Set("Content-Encoding", "gzip")
	}
	h.Add("Vary", "Accept, Accept-Encoding")
	w.Write(body) // a caller gone is not logged: see above
}

// body is the encoded metrics for key, gathered anew when the cache is
// older than maxAge.
func (m *metricsHandler) body(key metricsKey) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if m.at.IsZero() || now.Sub(m.at) >= m.maxAge || now.Before(m.at) {
		clear(m.cached)
		m.at = time.Time{}
	}
	if b, ok := m.cached[key]; ok && !m.fresh.AllowN(now, 1) {
		return b, nil
	}
	if len(m.cached) > 0 {
		clear(m.cached) // gathered anew: the other formats' bytes are older
		m.at = time.Time{}
	}
	families, err := m.g.Gather()
	m.gathers++
	if err != nil {
		if len(families) == 0 {
			return nil, err
		}
		// As promhttp's ContinueOnError: serve what was gathered.
		m.errs.Warn(m.log, "gathering metrics: some collectors failed", "err", err)
	}
	var buf bytes.Buffer
	var out interface {
		Write([]byte) (int, error)
	} = &buf
	var zw *gzip.Writer
	if key.gzip {
		zw = gzip.NewWriter(&buf)
		out = zw
	}
	enc := expfmt.NewEncoder(out, key.format)
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			m.errs.Warn(m.log, "encoding a metric family failed", "family", f.GetName(), "err", err)
		}
	}
	if c, ok := enc.(expfmt.Closer); ok {
		c.Close()
	}
	if zw != nil {
		zw.Close()
	}
	if m.at.IsZero() {
		m.at = now
	}
	b := buf.Bytes()
	if m.maxAge > 0 {
		m.cached[key] = b
	}
	return b, nil
}

// acceptsGzip reports whether r's Accept-Encoding names gzip.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.ReplaceAll(strings.TrimSpace(q), " ", "") != "q=0" {
			return true
		}
	}
	return false
}
