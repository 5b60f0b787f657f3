package ops

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonlock/baton/server"
)

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
