// Package ops serves Baton's operator HTTP API of docs/operations.md: /healthz,
// /readyz, /metrics and the admin endpoints under /v1/, which a bearer
// token can protect.
package ops

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
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

// The reasons of baton_ops_refusals_total.
const (
	refusedToken       = "token"              // no or a wrong admin token (401)
	refusedClientCert  = "client_cert"        // no verified client certificate (401)
	refusedRules       = "access_rules"       // the access rules' admin grant (403)
	refusedForgery     = "forgery"            // a cross-site or rebound browser request (403)
	refusedStreams     = "event_streams"      // a stream past the caller's or the server's limit (429, 503)
	refusedConnsPerIP  = "connections_per_ip" // a connection past its address's cap, closed at once (listener.go)
	refusedRequestRate = "request_rate"       // a request past its address's rate without a credential (429, requestrate.go)
)

func newRefusalCounters(reg prometheus.Registerer) map[string]prometheus.Counter {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_ops_refusals_total",
		Help: "Requests to the ops API refused for who sent them, by reason; their log lines are rate-limited, these count them all.",
	}, []string{"reason"})
	if reg != nil {
		if err := reg.Register(vec); err != nil {
			var dup prometheus.AlreadyRegisteredError
			if errors.As(err, &dup) {
				vec = dup.ExistingCollector.(*prometheus.CounterVec) // a second handler on one registry
			}
		}
	}
	out := make(map[string]prometheus.Counter)
	for _, r := range []string{refusedToken, refusedClientCert, refusedRules, refusedForgery, refusedStreams, refusedConnsPerIP, refusedRequestRate} {
		out[r] = vec.WithLabelValues(r)
	}
	return out
}

// refuse counts a refusal for reason and logs msg with args, rate-limited.
func (h *handler) refuse(reason, msg string, args ...any) {
	h.refused[reason].Inc()
	h.refusals.Warn(h.log, msg, args...)
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

// serveV1 checks the token before anything else, so that without it no
// answer tells which paths exist.
func (h *handler) serveV1(w http.ResponseWriter, r *http.Request, p string) {
	// A request that a member forwarded was authenticated by that member
	// (cluster.go); from here on, r is its caller's.
	r, forwarded, ok := h.fromFollower(w, r)
	if !ok {
		return
	}
	// A request carries the bearer token (tools) or the dashboard's login
	// cookie; a cookie alone never authorizes a state change without the
	// session's CSRF token.
	var (
		cookie   *uiSession
		cookieID string
	)
	if h.auth && r.Header.Get("Authorization") == "" {
		if id, s, ok := h.cookieSession(r); ok {
			cookie, cookieID = &s, id
		}
	}
	if h.auth && cookie == nil && !forwarded && !h.authorized(w, r) {
		return
	}
	if !h.auth && rebound(r) {
		h.refuseForgery(w, r, fmt.Sprintf("host %q is not an address or localhost: a browser may use the API without a token only by address", r.Host))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if why := crossSite(r); why != "" {
			h.refuseForgery(w, r, why)
			return
		}
		if cookie != nil && subtle.ConstantTimeCompare([]byte(r.Header.Get(csrfHeader)), []byte(cookie.csrf)) != 1 {
			h.refuseForgery(w, r, "missing or wrong "+csrfHeader+" header")
			return
		}
	}
	if h.requireCert && server.VerifiedIdentities(r.TLS) == nil {
		h.refuse(refusedClientCert, "ops: request without a verified client certificate",
			"method", r.Method, "path", r.URL.EscapedPath(), "client", r.RemoteAddr)
		writeError(w, http.StatusUnauthorized, "a verified client certificate is required")
		return
	}
	trust(r.Context()) // its connection leaves its address's cap (listener.go)
	segs, ok := splitPath(strings.TrimPrefix(p, "/v1/"))
	if !ok {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("bad percent-encoding in path %s", p))
		return
	}
	// A stream outlives its request: a logout must end it too.
	still := func() bool { return true }
	if cookie != nil {
		caller := callerKey(r)
		still = func() bool { _, ok := h.ui.get(cookieID, time.Now(), caller); return ok }
	}
	if len(segs) >= 1 && segs[0] == "cluster" {
		h.serveCluster(w, r, p, segs, func() bool { return h.toLeaderAs(w, r, cookie != nil, still) })
		return
	}
	if h.toLeaderAs(w, r, cookie != nil, still) {
		return
	}
	var (
		methods []string
		serve   func()
	)
	switch {
	case len(segs) == 1 && segs[0] == "events":
		methods, serve = methodsGet, func() {
			if h.cluster != nil {
				// A leader that loses its term ends its streams: their
				// clients come back through toLeader to the new leader.
				var stop context.CancelFunc
				r, stop = endWhen(r, func() bool { _, self := h.cluster.LeaderOpsAddr(); return !self })
				defer stop()
			}
			h.streamEvents(w, r, still)
		}
	case len(segs) == 1 && segs[0] == "locks":
		methods, serve = methodsGet, func() { h.listLocks(w, r) }
	case len(segs) == 2 && segs[0] == "locks" && segs[1] != "":
		methods, serve = methodsGet, func() { h.getLock(w, segs[1]) }
	case len(segs) == 3 && segs[0] == "locks" && segs[1] != "" && segs[2] == "fence":
		methods, serve = methodsGet, func() { h.fence(w, r, segs[1]) }
	case len(segs) == 3 && segs[0] == "locks" && segs[1] != "" && segs[2] == "release":
		methods, serve = methodsPost, func() { h.release(w, r, segs[1]) }
	case len(segs) == 3 && segs[0] == "sessions" && segs[1] != "" && segs[2] == "kick":
		methods, serve = methodsPost, func() { h.kick(w, r, segs[1]) }
	case len(segs) == 3 && segs[0] == "sessions" && segs[1] != "" && segs[2] == "release":
		methods, serve = methodsPost, func() { h.releaseSession(w, r, segs[1]) }
	default:
		msg := fmt.Sprintf("no endpoint %s", p)
		if len(segs) > 2 && segs[0] == "locks" {
			msg += ` (send a "/" in a lock name as %2F)`
		}
		writeError(w, http.StatusNotFound, msg)
		return
	}
	if !allow(w, r, methods) || !drainBody(w, r) {
		return
	}
	serve()
}

// serveCluster answers /v1/cluster (on any node; with ?view=leader a
// follower sends it on to the leader, which alone knows its members'
// health) and /v1/cluster/members (on the leader; a follower sends it on).
// toLeader sends r on to the leader, as every other /v1/ request, and
// reports false on the leader itself.
func (h *handler) serveCluster(w http.ResponseWriter, r *http.Request, p string, segs []string, toLeader func() bool) {
	switch {
	case len(segs) == 1:
		if !allow(w, r, methodsGet) || !drainBody(w, r) {
			return
		}
		if r.URL.Query().Get("view") == "leader" && h.cluster != nil && toLeader() {
			return
		}
		h.clusterStatus(w)
		return
	case h.cluster == nil:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s: this server is standalone, not a cluster node", p))
		return
	case len(segs) == 2 && segs[1] == "members":
		if !allow(w, r, methodsPost) || h.toLeader(w, r) || !h.mayChangeMembership(w, r, "add a member") {
			return
		}
		h.addMember(w, r)
	case len(segs) == 3 && segs[1] == "members" && segs[2] != "":
		if !allow(w, r, []string{http.MethodDelete}) || h.toLeader(w, r) || !drainBody(w, r) || !h.mayChangeMembership(w, r, "remove member "+strconv.Quote(segs[2])) {
			return
		}
		h.removeMember(w, r, segs[2])
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s", p))
	}
}

// splitPath splits an escaped path into unescaped segments; false if a
// segment's percent-encoding is invalid.
func splitPath(p string) ([]string, bool) {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		u, err := url.PathUnescape(s)
		if err != nil {
			return nil, false
		}
		segs[i] = u
	}
	return segs, true
}

// provesItself reports whether r carries a credential: a verified client
// certificate, or the admin token. It answers nothing.
func (h *handler) provesItself(r *http.Request) bool {
	if callerIdentities(r) != nil {
		return true
	}
	scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !h.auth || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	d := sha256.Sum256([]byte(strings.TrimLeft(tok, " ")))
	return subtle.ConstantTimeCompare(d[:], h.digest[:]) == 1
}

// authorized reports whether r carries the admin token, answering 401 if not.
func (h *handler) authorized(w http.ResponseWriter, r *http.Request) bool {
	var msg string
	switch scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " "); {
	case scheme == "":
		msg = `missing "Authorization: Bearer <token>" header`
	case !strings.EqualFold(scheme, "Bearer"):
		// Never echo the value: a token sent without "Bearer " is the scheme here.
		msg = `Authorization header is not "Bearer <token>"`
	default:
		d := sha256.Sum256([]byte(strings.TrimLeft(tok, " ")))
		if subtle.ConstantTimeCompare(d[:], h.digest[:]) == 1 {
			return true
		}
		msg = "invalid bearer token"
	}
	h.refuse(refusedToken, "ops: unauthorized request", "reason", msg,
		"method", r.Method, "path", r.URL.EscapedPath(), "client", r.RemoteAddr)
	w.Header().Set("WWW-Authenticate", `Bearer realm="baton"`)
	writeError(w, http.StatusUnauthorized, msg)
	return false
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

// drainBody reads and drops r's body up to maxBody, answering 413 beyond it
// and 400 if it cannot be read, so no admin action runs on a bad request.
func drainBody(w http.ResponseWriter, r *http.Request) bool {
	_, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, maxBody))
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return true
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("request body too large: the limit is %d bytes and the API reads no body", maxBody))
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("reading request body: %v", err))
	}
	return false
}

// listLocks answers GET /v1/locks. One listing is made at a time: a
// listing of a large table is CPU-bound (copying it in steps, then its
// JSON), and tools polling it without pause, many at once, would
// otherwise take every CPU from the sessions, whose grants and heartbeats
// then wait in the run queue. The others wait their turn, holding no CPU.
func (h *handler) listLocks(w http.ResponseWriter, r *http.Request) {
	select {
	case h.listing <- struct{}{}:
		defer func() { <-h.listing }()
	case <-r.Context().Done():
		return // the client left while it waited
	}
	views := h.b.Locks()
	out := locksJSON{Locks: make([]lockJSON, 0, len(views)), GraceRemainingMs: h.graceMs()}
	for _, v := range views {
		out.Locks = append(out.Locks, toLock(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) getLock(w http.ResponseWriter, name string) {
	v, ok := h.b.Lock(name)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("lock %q not found: nobody holds or waits for it", name))
		return
	}
	l := toLock(v)
	l.GraceRemainingMs = h.graceMs()
	writeJSON(w, http.StatusOK, l)
}

// release answers POST /v1/locks/{name}/release: every holder is ended.
// One holder, shared or not, is answered as its SESSION; several as
// {"released": [SESSION, ...]} in grant order.
func (h *handler) release(w http.ResponseWriter, r *http.Request, name string) {
	if !h.mayAdmin(w, r, "force-release", name) {
		return
	}
	ended, err := h.b.ForceReleaseAll(name)
	switch {
	case err == nil:
	case errors.Is(err, server.ErrNotHeld):
		writeError(w, http.StatusNotFound, fmt.Sprintf("lock %q is not held", name))
		return
	case errors.Is(err, server.ErrEarlierClaimsRefused):
		h.log.Info("ops: force-released lock in a crash grace: its claims of an earlier term will not be taken back", "lock", name,
			"identities", callerIdentities(r), "client", r.RemoteAddr)
		writeJSON(w, http.StatusOK, releasedJSON{Released: []sessionJSON{}, Message: fmt.Sprintf("lock %q: %v", name, err)})
		return
	default:
		h.fail(w, r, fmt.Errorf("force-release lock %q: %w", name, err))
		return
	}
	for _, sv := range ended {
		h.log.Info("ops: force-released lock", "lock", name, "session", sv.ID,
			"owner", sv.Owner, "remote", sv.Remote, "fencing_token", sv.Token, "shared", sv.Shared,
			"identities", callerIdentities(r), "client", r.RemoteAddr)
	}
	// The ended sessions were holders, so their tokens are shown.
	if len(ended) == 1 {
		writeJSON(w, http.StatusOK, toSession(ended[0], true))
		return
	}
	out := releasedJSON{Released: make([]sessionJSON, 0, len(ended))}
	for _, sv := range ended {
		out.Released = append(out.Released, toSession(sv, true))
	}
	writeJSON(w, http.StatusOK, out)
}

// releaseSession answers POST /v1/sessions/{id}/release: one holder,
// of any lock and any kind, is ended alone.
func (h *handler) releaseSession(w http.ResponseWriter, r *http.Request, id string) {
	h.endSession(w, r, id, "force-release", h.b.ReleaseSessionIf, server.ErrWaiter, func() string {
		return fmt.Sprintf("session %q waits for its lock; remove it from the queue with POST /v1/sessions/%s/kick", id, url.PathEscape(id))
	})
}

func (h *handler) kick(w http.ResponseWriter, r *http.Request, id string) {
	h.endSession(w, r, id, "kick", h.b.KickIf, server.ErrHolder, func() string { return h.holderMessage(id) })
}

// endSession ends session id by end (KickIf or ReleaseSessionIf), which
// checks the access rules and acts in one step: the session's lock is
// known only in the table, and no session may enter it between the check
// and the action (ids are sequential, and a caller could aim at the next
// one). conflict is end's error for a session of the other kind, answered
// 409 with conflictMsg.
func (h *handler) endSession(w http.ResponseWriter, r *http.Request, id, action string,
	end func(id string, allow func(lock string) error) (server.SessionView, error), conflict error, conflictMsg func() string) {
	var allow func(lock string) error
	if h.acl != nil && h.acl() != nil {
		what := "kick a waiter of"
		if action != "kick" {
			what = "force-release a holder of"
		}
		allow = func(lock string) error {
			if refused := h.adminCheck(r, what, lock); refused != nil {
				return refused
			}
			return nil // not a nil *adminRefusal, which is a non-nil error
		}
	}
	sv, err := end(id, allow)
	var refused *adminRefusal
	switch {
	case err == nil:
	case errors.As(err, &refused):
		h.refuseAdmin(w, r, refused)
		return
	case errors.Is(err, server.ErrUnknownSession):
		writeError(w, http.StatusNotFound, fmt.Sprintf("session %q not found", id))
		return
	case errors.Is(err, conflict):
		writeError(w, http.StatusConflict, conflictMsg())
		return
	default:
		h.fail(w, r, fmt.Errorf("%s session %q: %w", action, id, err))
		return
	}
	if action == "kick" {
		h.log.Info("ops: kicked session", "session", sv.ID,
			"owner", sv.Owner, "remote", sv.Remote,
			"identities", callerIdentities(r), "client", r.RemoteAddr)
		writeJSON(w, http.StatusOK, toSession(sv, false))
		return
	}
	h.log.Info("ops: force-released session", "session", sv.ID,
		"owner", sv.Owner, "remote", sv.Remote, "fencing_token", sv.Token, "shared", sv.Shared,
		"identities", callerIdentities(r), "client", r.RemoteAddr)
	writeJSON(w, http.StatusOK, toSession(sv, true))
}

// holderMessage tells how to end holder id: force-release its lock, named
// if a fresh snapshot still shows it as holder, or the one session.
func (h *handler) holderMessage(id string) string {
	for _, l := range h.b.Locks() {
		if l.Holder == nil {
			continue
		}
		if l.Holder.ID == id && len(l.Holders) <= 1 {
			return fmt.Sprintf("session %q holds lock %q; force-release it with POST /v1/locks/%s/release",
				id, l.Name, url.PathEscape(l.Name))
		}
		for _, hv := range l.Holders {
			if hv.ID == id {
				return fmt.Sprintf("session %q holds lock %q with others; force-release it alone with POST /v1/sessions/%s/release, or every holder with POST /v1/locks/%s/release",
					id, l.Name, url.PathEscape(id), url.PathEscape(l.Name))
			}
		}
	}
	return fmt.Sprintf("session %q holds its lock; force-release it with POST /v1/locks/{name}/release", id)
}

// fail answers an error the API does not expect from the backend.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	if errors.Is(err, server.ErrServerClosed) || errors.Is(err, server.ErrHandingOver) || errors.Is(err, server.ErrNotRecorded) {
		status = http.StatusServiceUnavailable
	}
	h.log.Error("ops: admin action failed", "err", err, "client", r.RemoteAddr)
	writeError(w, status, err.Error())
}

// mayAdmin checks the access rules for an admin action on lock name,
// answering 403 if they refuse it.
func (h *handler) mayAdmin(w http.ResponseWriter, r *http.Request, action, name string) bool {
	if err := h.adminCheck(r, action, name); err != nil {
		h.refuseAdmin(w, r, err)
		return false
	}
	return true
}

// adminRefusal is the access rules' refusal of an admin action.
type adminRefusal struct {
	action, lock string
	ids          []string
	msg          string
}

func (e *adminRefusal) Error() string { return e.msg }

// adminCheck is the access rules' verdict on action on lock name for r's
// caller: nil, or the refusal. It does no I/O and never blocks: KickIf
// calls it under the table's mutex.
func (h *handler) adminCheck(r *http.Request, action, name string) *adminRefusal {
	if h.acl == nil {
		return nil
	}
	acl := h.acl()
	if acl == nil {
		return nil
	}
	ids := callerIdentities(r)
	if acl.MayAdmin(ids, name) {
		return nil
	}
	who := "without a verified client certificate"
	if len(ids) > 0 {
		who = "identity " + strings.Join(quoteAll(ids), ", ")
	}
	return &adminRefusal{action: action, lock: name, ids: ids,
		msg: fmt.Sprintf("client %s may not %s lock %q", who, action, name)}
}

// mayAdminSome reports whether r's caller may take some admin action:
// every caller when no access rules judge admin actions (the token, with
// a certificate where one is required, is then all it takes), else one
// whose identities some rule grants "admin".
func (h *handler) mayAdminSome(r *http.Request) bool {
	if h.acl == nil {
		return true
	}
	acl := h.acl()
	return acl == nil || acl.HasAdminGrant(callerIdentities(r))
}

// refuseAdmin answers 403 for refusal, and logs it.
func (h *handler) refuseAdmin(w http.ResponseWriter, r *http.Request, refusal *adminRefusal) {
	h.refuse(refusedRules, "ops: admin action refused by the access rules", "action", refusal.action, "lock", refusal.lock,
		"identities", refusal.ids, "client", r.RemoteAddr)
	writeError(w, http.StatusForbidden, refusal.msg)
}

// callerIdentities are the identities of r's caller that its verified
// client certificate proves: what the access rules judge, and what an
// admin action's log line names beside the caller's address.
func callerIdentities(r *http.Request) []string { return server.VerifiedIdentities(r.TLS) }

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}
