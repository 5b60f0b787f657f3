package ops_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonlock/baton/ops"
)

// failingWriter is a caller that went away: every write fails.
type failingWriter struct{ h http.Header }

func (w *failingWriter) Header() http.Header { return w.h }
func (w *failingWriter) WriteHeader(int)     {}
func (w *failingWriter) Write([]byte) (int, error) {
	return 0, errors.New("write tcp: broken pipe")
}

// TestMetricsAbortedScrapesLogNothing: a scrape whose caller went away
// (each write fails, as with a reset) logs nothing; aborted scrapes, from
// anyone, cannot fill the log.
func TestMetricsAbortedScrapesLogNothing(t *testing.T) {
	var log bytes.Buffer
	h := ops.NewHandler(ops.Config{Backend: newFake(), Gatherer: prometheus.DefaultGatherer, Logger: slog.New(slog.NewTextHandler(&log, nil)), MetricsMaxAge: time.Second})
	for range 100 {
		h.ServeHTTP(&failingWriter{h: http.Header{}}, httptest.NewRequest("GET", "/metrics", nil))
	}
	if lines := strings.Count(log.String(), "\n"); lines > 0 {
		t.Errorf("100 aborted scrapes wrote %d log lines, want none:\n%.600s", lines, log.String())
	}
}
