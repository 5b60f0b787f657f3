package ops

import (
	"net"
	"net/http"
	"net/netip"
	"time"

	"golang.org/x/time/rate"
)

// Requests from a source that has proved nothing. Whatever an open
// endpoint costs (/healthz, /readyz, a cached /metrics, a static file, a
// 401), a peer that loops on it over its connections can make the server
// pay it thousands of times a second. So the connections of one source
// that have made no authenticated request begin at most RequestRate
// requests a second together (twice as many at once); a request past it
// waits for its turn, and one whose turn would come after
// maxRequestWait is answered 429 after that wait, its connection closed.
// Probes, scrapers and a dashboard's page load ask far less often; a
// caller that proves itself (the token, a login, a member's forward
// channel) is not counted from then on.

// DefaultRequestRate is the RequestRate of baton serve.
const DefaultRequestRate = 32

// maxRequestWait bounds how long a request waits for its turn.
const maxRequestWait = 2 * time.Second

// maxRequestSources bounds the sources whose budgets are kept; past it,
// the sources whose budget is whole are forgotten, and new ones share one.
const maxRequestSources = 1 << 14

// requestTurn waits for the turn of r's request (see above), unless it
// proves who sends it, and reports whether it may be served: false, with
// the answer written, when its turn would come too late.
func requestTurn(w http.ResponseWriter, r *http.Request, proven bool) bool {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	lc := limitConnOf(c)
	if proven || lc == nil || lc.l.lim.RequestRate <= 0 || !lc.addr.IsValid() {
		return true
	}
	l := lc.l
	now := time.Now()
	l.mu.Lock()
	if lc.trusted {
		l.mu.Unlock()
		return true
	}
	lim := l.requestLimiterLocked(lc.addr, now)
	res := lim.ReserveN(now, 1)
	l.mu.Unlock()
	wait := res.DelayFrom(now)
	late := wait > maxRequestWait
	if late {
		res.CancelAt(now)
		wait = maxRequestWait
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return false
		}
	}
	if late {
		l.refusedRate.Inc()
		l.refusals.Warn(l.log, "ops: request refused: its address sends more requests than it may without a credential",
			"client", r.RemoteAddr, "path", r.URL.EscapedPath(), "ops_request_rate", float64(l.lim.RequestRate))
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "too many requests from your address without a credential")
		return false
	}
	return true
}

// requestLimiterLocked is the budget of source. l.mu must be held.
func (l *limitListener) requestLimiterLocked(source netip.Prefix, now time.Time) *rate.Limiter {
	if lim, ok := l.requests[source]; ok {
		return lim
	}
	if len(l.requests) >= maxRequestSources {
		for k, lim := range l.requests {
			if lim.TokensAt(now) >= float64(lim.Burst()) {
				delete(l.requests, k)
			}
		}
		if len(l.requests) >= maxRequestSources {
			return l.requestsOverflow
		}
	}
	lim := rate.NewLimiter(l.lim.RequestRate, 2*int(max(1, l.lim.RequestRate)))
	l.requests[source] = lim
	return lim
}
