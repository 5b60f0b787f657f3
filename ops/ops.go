// Package ops serves Baton's operator HTTP API of docs/operations.md: /healthz,
// /readyz, /metrics and the admin endpoints under /v1/, which a bearer
// token can protect.
package ops

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonlock/baton/server"
)

// maxBody caps a request body. The API reads no body; the cap only keeps a
// client from making the server drain megabytes before it answers.
const maxBody = 1 << 10

// Backend is what the ops API needs of the lock server (*server.Server implements it).
type Backend interface {
	Ready() bool
	Locks() []server.LockView
	Lock(name string) (server.LockView, bool)
	// ForceReleaseAll ends every holder of lock name, in grant order, and
	// returns them.
	ForceReleaseAll(name string) ([]server.SessionView, error) // server.ErrNotHeld
	// KickIf kicks waiter id if allow, called with its lock's name in the
	// same step as the kick, returns nil; allow's error is returned as is.
	KickIf(id string, allow func(lock string) error) (server.SessionView, error) // server.ErrUnknownSession, server.ErrHolder
	// ReleaseSessionIf ends holder id alone, with allow as in KickIf.
	ReleaseSessionIf(id string, allow func(lock string) error) (server.SessionView, error) // server.ErrUnknownSession, server.ErrWaiter
}

var _ Backend = (*server.Server)(nil)

// graceReporter is the part of a Backend that knows its grace: how long it
// still grants nothing (the crash grace of a restarted server, the
// failover grace of a new leader). *server.Server has it; a Backend
// without it is never in a grace.
type graceReporter interface {
	GraceRemaining() time.Duration
}

var _ graceReporter = (*server.Server)(nil)

// graceMs is the backend's grace remaining in whole milliseconds, rounded
// up so that a grace in its last millisecond is not shown as none.
func (h *handler) graceMs() int64 {
	g, ok := h.b.(graceReporter)
	if !ok {
		return 0
	}
	d := g.GraceRemaining()
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Config is what NewHandler needs.
type Config struct {
	// Backend is the lock server. Required: NewHandler panics on nil.
	Backend Backend
	// Gatherer feeds /metrics (the server's *prometheus.Registry).
	// Nil serves an empty metric set.
	Gatherer prometheus.Gatherer
	// AdminToken is the bearer token every /v1/ request must carry.
	// "" means /v1/ needs no token.
	AdminToken string
	// Logger receives admin actions and failures. Nil means slog.Default().
	Logger *slog.Logger
	// RequireClientCert makes every /v1/ request need a client certificate
	// that the listener's TLS handshake verified (mutual TLS), on top of the
	// token. /healthz, /readyz and /metrics stay open.
	RequireClientCert bool
	// ACL, if not nil, returns the access rules in force (nil: none). Under
	// rules, a force-release or kick needs a verified client certificate
	// with an identity that an "admin" prefix allows for the lock; reads
	// need no grant. It is a function so that a reload takes effect.
	ACL func() *server.ACL
	// Cluster, if not nil, makes this the ops API of a replicated node:
	// GET /v1/cluster describes it, /v1/cluster/members changes the
	// membership, and a follower sends every other /v1/ request on to the
	// leader's ops address (503 with no leader known).
	Cluster Cluster
	// NodeID names this node in the X-Baton-Forwarded-By header of what it
	// sends on to the leader.
	NodeID string
	// ProxyTransport carries requests sent on to the leader; nil means
	// http.DefaultTransport. ProxyTLS makes them https on the forward
	// channel (ForwardProtocol): ProxyTransport presents the node's
	// certificate, and the requests carry the caller's identity instead of
	// its credentials (cluster.go).
	ProxyTransport http.RoundTripper
	ProxyTLS       bool
	// Events feeds GET /v1/events. Nil means the Backend's, if it has one.
	Events EventSource
	// Registerer receives the ops API's own series (refused requests,
	// open event streams); nil keeps them unpublished.
	Registerer prometheus.Registerer
	// MaxEventStreams caps the open GET /v1/events streams; one more is
	// answered 503. Its last eighth is kept for callers that may take
	// admin actions (see streamLimits). Zero means DefaultMaxEventStreams.
	MaxEventStreams int
	// MaxEventStreamsPerCaller caps the open streams of one caller: the
	// identities of its verified client certificate, or its address
	// without one; one more is answered 429. Zero means
	// DefaultMaxEventStreamsPerCaller.
	MaxEventStreamsPerCaller int
	// EventWriteTimeout bounds one write to an event stream: a subscriber
	// that stops reading is cut once its bounded buffer is full and a write
	// has waited this long. Zero means DefaultEventWriteTimeout.
	EventWriteTimeout time.Duration
	// SourcePrefixes say which addresses are one caller without a
	// certificate, for the event streams per caller (an IPv6 host has a
	// /64). The zero value means server.DefaultSourcePrefixes.
	SourcePrefixes server.SourcePrefixes
	// MetricsMaxAge is how long /metrics answers with the figures it
	// gathered last (see metrics.go): scrapes from anyone then cost the
	// lock sessions nothing noticeable. Zero gathers for every scrape.
	MetricsMaxAge time.Duration
}

// Defaults of Config.
const (
	DefaultMaxEventStreams = 128
	// DefaultMaxEventStreamsPerCaller is a quarter of the default
	// MaxEventStreams: a dashboard tab or a baton watch holds one.
	DefaultMaxEventStreamsPerCaller = 32
	DefaultEventWriteTimeout        = 10 * time.Second
)

// NewHandler returns the http.Handler of docs/operations.md's "The ops
// HTTP API".
func NewHandler(cfg Config) http.Handler {
	if cfg.Backend == nil {
		panic("ops: Config.Backend is nil")
	}
	g := cfg.Gatherer
	if g == nil {
		g = prometheus.NewRegistry()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	h := &handler{b: cfg.Backend, log: log, requireCert: cfg.RequireClientCert, acl: cfg.ACL,
		cluster: cfg.Cluster, nodeID: cfg.NodeID, proxyTransport: cfg.ProxyTransport, proxyScheme: "http",
		events: cfg.Events}
	if cfg.ProxyTLS {
		h.proxyScheme = "https"
	}
	if h.events == nil {
		h.events, _ = cfg.Backend.(EventSource)
	}
	h.listing = make(chan struct{}, 1)
	h.refusals = server.NewRefusalLog()
	h.refused = newRefusalCounters(cfg.Registerer)
	h.streams.max = cfg.MaxEventStreams
	if h.streams.max <= 0 {
		h.streams.max = DefaultMaxEventStreams
	}
	h.streams.perCaller = cfg.MaxEventStreamsPerCaller
	if h.streams.perCaller <= 0 {
		h.streams.perCaller = DefaultMaxEventStreamsPerCaller
	}
	h.streams.adminRoom = h.streams.max / 8
	h.streams.writeTimeout = cfg.EventWriteTimeout
	if h.streams.writeTimeout <= 0 {
		h.streams.writeTimeout = DefaultEventWriteTimeout
	}
	h.streams.register(cfg.Registerer)
	var run [4]byte
	rand.Read(run[:]) // never fails (crypto/rand)
	h.run = hex.EncodeToString(run[:])
	if cfg.AdminToken != "" {
		// Comparing digests keeps the comparison constant-time in the
		// token's length too.
		h.auth = true
		h.digest = sha256.Sum256([]byte(cfg.AdminToken))
		h.token = cfg.AdminToken
	}
	h.metrics = newMetricsHandler(g, cfg.MetricsMaxAge, log) // metrics.go
	h.prefixes = cfg.SourcePrefixes
	if h.prefixes == (server.SourcePrefixes{}) {
		h.prefixes = server.DefaultSourcePrefixes()
	}
	return h
}

var (
	methodsGet  = []string{http.MethodGet, http.MethodHead}
	methodsPost = []string{http.MethodPost}
)

type handler struct {
	b       Backend
	log     *slog.Logger
	metrics http.Handler
	auth    bool
	digest  [sha256.Size]byte // of the admin token, if auth
	// token is the admin token itself, which a follower puts on the
	// dashboard's requests it sends on to the leader (cluster.go).
	token string

	requireCert bool
	acl         func() *server.ACL

	cluster        Cluster
	nodeID         string
	proxyTransport http.RoundTripper
	proxyScheme    string
	events         EventSource
	encoded        encodedEvents // the SSE text of recent events (events.go)
	run            string        // this handler's part of event ids (events.go)
	ui             uiSessions    // dashboard logins (ui.go)
	// refusals rate-limits the WARN lines of refused requests; refused
	// counts every one of them, by reason.
	refusals *server.RefusalLog
	refused  map[string]prometheus.Counter
	streams  streamLimits          // of GET /v1/events (events.go)
	prefixes server.SourcePrefixes // which addresses are one caller (events.go)
	listing  chan struct{}         // a place for the one listing of the locks made at a time
}

// memberNotReady is why this node is not a member in good standing ("" if
// it is): a voter that knows the cluster's leader, while not shutting down.
// GET /readyz?member asks it, where /readyz alone is 200 on the leader
// only: a container platform's readiness for a node of a cluster (a
// restarted node is ready once it follows the leader again, and a rolling
// update or a disruption budget counts the followers too).
func (h *handler) memberNotReady() string {
	if s, ok := h.b.(interface{ ShuttingDown() bool }); ok && s.ShuttingDown() {
		return "shutting down"
	}
	if h.cluster == nil {
		return "not accepting new sessions"
	}
	v := h.cluster.View()
	if v.Leader == nil {
		return "no leader known"
	}
	for _, m := range v.Members {
		if m.ID != v.NodeID {
			continue
		}
		if !m.Voter {
			return "not a voter"
		}
		if v.Role != "follower" && v.Role != "leader" {
			return "a " + v.Role
		}
		return ""
	}
	return "not a member"
}

// ServeHTTP routes on the escaped path itself rather than through
// http.ServeMux: the mux never binds a wildcard to a segment that unescapes
// to "/" (the lock named "/", sent as %2F), and it answers paths with dot
// segments with a redirect, which an admin POST should never get.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if requestTurn(w, r, h.provesItself(r)) { // requestrate.go
		boundBody(w, r, h.serve) // body.go
	}
}

func (h *handler) serve(w http.ResponseWriter, r *http.Request) {
	switch p := r.URL.EscapedPath(); {
	case p == "/healthz":
		if allow(w, r, methodsGet) {
			writeText(w, http.StatusOK, "ok\n")
		}
	case p == "/readyz":
		if !allow(w, r, methodsGet) {
			return
		}
		switch {
		case h.b.Ready():
			writeText(w, http.StatusOK, "ready\n")
		case r.URL.Query().Has("member"):
			if why := h.memberNotReady(); why != "" {
				writeText(w, http.StatusServiceUnavailable, "not ready: "+why+"\n")
			} else {
				writeText(w, http.StatusOK, "ready: a member following the leader\n")
			}
		default:
			writeText(w, http.StatusServiceUnavailable, "not ready: not accepting new sessions\n")
		}
	case p == "/metrics":
		if allow(w, r, methodsGet) {
			h.metrics.ServeHTTP(w, r)
		}
	case p == "/v1" || strings.HasPrefix(p, "/v1/"):
		h.serveV1(w, r, p)
	case p == "/" || strings.HasPrefix(p, "/ui/"):
		h.serveUI(w, r, p)
	case p == "/favicon.ico":
		// Browsers ask for it on every page they show, an API answer
		// included; a 404 would be an error in their console.
		if allow(w, r, methodsGet) {
			w.Header().Set("Cache-Control", "max-age=86400")
			w.WriteHeader(http.StatusNoContent)
		}
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s", p))
	}
}

// allow answers 405 with an Allow header unless r's method is one of methods.
func allow(w http.ResponseWriter, r *http.Request, methods []string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	list := strings.Join(methods, ", ")
	w.Header().Set("Allow", list)
	writeError(w, http.StatusMethodNotAllowed,
		fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.EscapedPath(), list))
	return false
}
