package ops

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/server"
)

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
