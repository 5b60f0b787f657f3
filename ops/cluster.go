package ops

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/batonlock/baton/server"
)

// Cluster is what the ops API needs of a replicated node (package
// cluster's *Node implements it); nil in a standalone server.
type Cluster interface {
	View() server.ClusterView
	// LeaderOpsAddr is the leader's advertised ops address ("" if none is
	// known) and whether this node is that leader, serving.
	LeaderOpsAddr() (addr string, self bool)
	AddMember(id, raftAddr string) error // server.ErrNotLeader, ErrMemberExists...
	RemoveMember(id string) error        // server.ErrNotLeader, ErrNotMember...
	// Member is the current member whose node certificate the TLS
	// connection cs presented; an error if it names none, or a node that
	// is not a member now.
	Member(cs *tls.ConnectionState) (id string, err error)
}

// ForwardProtocol is the application protocol (ALPN) that a follower
// offers when it opens the forward channel: the TLS connection on which it
// sends /v1/ requests on to the leader's ops listener, each side
// presenting its node certificate and admitting only a current member's
// (see Config.ProxyTLS). The offer only picks the handshake's
// configuration; the channel speaks HTTP/1.1.
const ForwardProtocol = "baton-forward"

// On the forward channel a request carries, instead of the caller's
// credentials, who the caller is: the follower has authenticated it (token
// or login, and client certificate) and the leader decides, by its own
// rules, what that caller may do. Only a current member's connection is
// believed; from anyone else these headers are dropped.
const (
	callerCertHeader = "X-Baton-Caller-Cert" // the caller's verified client certificate, base64 DER; absent: none
	callerAddrHeader = "X-Baton-Caller-Addr" // the caller's remote address, host:port
)

type clusterJSON struct {
	NodeID           string       `json:"node_id"`
	ClusterID        string       `json:"cluster_id,omitempty"`
	Role             string       `json:"role"`
	Leader           *clusterNode `json:"leader"`
	Term             uint64       `json:"term"`
	Epoch            uint64       `json:"epoch"`
	LeaseBoundMs     int64        `json:"lease_bound_ms"`
	GraceRemainingMs int64        `json:"grace_remaining_ms"`
	// Resumable: claims of version 3 made now survive a change of leader
	// (absent on a standalone server).
	Resumable *bool           `json:"resumable,omitempty"`
	Members   []clusterMember `json:"members"`
	// The leader's view of its members' health (absent elsewhere: ask
	// with ?view=leader, which a follower sends on to the leader).
	Healthy          *bool `json:"healthy,omitempty"`
	VotersHealthy    *int  `json:"voters_healthy,omitempty"`
	FailureTolerance *int  `json:"failure_tolerance,omitempty"`
}

type clusterNode struct {
	ID      string `json:"id"`
	Addr    string `json:"addr"`
	OpsAddr string `json:"ops_addr"`
}

type clusterMember struct {
	ID       string         `json:"id"`
	RaftAddr string         `json:"raft_addr"`
	Voter    bool           `json:"voter"`
	Role     string         `json:"role"`
	Health   *memberHealthJ `json:"health"` // null where this node is not the leader
}

type memberHealthJ struct {
	Reachable     bool   `json:"reachable"`
	LastContactMs *int64 `json:"last_contact_ms"` // null: never
	Failures      uint64 `json:"failures"`
	IndexLag      uint64 `json:"index_lag"`
	Healthy       bool   `json:"healthy"`
	SinceMs       int64  `json:"since_ms"`
}

func (h *handler) clusterStatus(w http.ResponseWriter) {
	if h.cluster == nil {
		// A standalone server's grace is its crash grace.
		writeJSON(w, http.StatusOK, clusterJSON{Role: "standalone", GraceRemainingMs: h.graceMs(), Members: []clusterMember{}})
		return
	}
	v := h.cluster.View()
	out := clusterJSON{
		NodeID: v.NodeID, ClusterID: v.ClusterID, Role: v.Role, Term: v.Term, Epoch: v.Epoch,
		LeaseBoundMs:     v.LeaseBound.Milliseconds(),
		GraceRemainingMs: v.GraceRemaining.Milliseconds(),
		Resumable:        &v.Resumable,
		Members:          []clusterMember{},
	}
	if v.Leader != nil {
		out.Leader = &clusterNode{ID: v.Leader.ID, Addr: v.Leader.Addr, OpsAddr: v.Leader.OpsAddr}
	}
	for _, m := range v.Members {
		cm := clusterMember{ID: m.ID, RaftAddr: m.RaftAddr, Voter: m.Voter, Role: m.Role}
		if h := m.Health; h != nil {
			cm.Health = &memberHealthJ{Reachable: h.Reachable, Failures: h.Failures, IndexLag: h.IndexLag, Healthy: h.Healthy, SinceMs: h.Since.Milliseconds()}
			if h.LastContact >= 0 {
				ms := h.LastContact.Milliseconds()
				cm.Health.LastContactMs = &ms
			}
		}
		out.Members = append(out.Members, cm)
	}
	if v.Healthy != nil {
		vh, ft := v.VotersHealthy, v.FailureTolerance
		out.Healthy, out.VotersHealthy, out.FailureTolerance = v.Healthy, &vh, &ft
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) addMember(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID       string `json:"id"`
		RaftAddr string `json:"raft_addr"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf(`body must be {"id": "...", "raft_addr": "host:port"}: %v`, err))
		return
	}
	if req.ID == "" || req.RaftAddr == "" {
		writeError(w, http.StatusBadRequest, `body needs both "id" and "raft_addr"`)
		return
	}
	if err := h.cluster.AddMember(req.ID, req.RaftAddr); err != nil {
		h.memberFail(w, r, err)
		return
	}
	h.log.Info("ops: member added", "id", req.ID, "raft_addr", req.RaftAddr,
		"identities", server.VerifiedIdentities(r.TLS), "client", r.RemoteAddr)
	h.clusterStatus(w)
}

func (h *handler) removeMember(w http.ResponseWriter, r *http.Request, id string) {
	if err := h.cluster.RemoveMember(id); err != nil {
		h.memberFail(w, r, err)
		return
	}
	h.log.Info("ops: member removed", "id", id,
		"identities", server.VerifiedIdentities(r.TLS), "client", r.RemoteAddr)
	h.clusterStatus(w)
}

// mayChangeMembership applies the admin rule of force-release to a
// membership change, answering 403 if the access rules refuse it. A
// member can do anything to every lock (it can lead), so a change needs
// an admin grant of every lock name: the prefix "".
func (h *handler) mayChangeMembership(w http.ResponseWriter, r *http.Request, action string) bool {
	if h.acl == nil {
		return true
	}
	acl := h.acl()
	if acl == nil {
		return true
	}
	ids := server.VerifiedIdentities(r.TLS)
	if acl.MayAdmin(ids, "") {
		return true
	}
	who := "without a verified client certificate"
	if len(ids) > 0 {
		who = "identity " + strings.Join(quoteAll(ids), ", ")
	}
	h.log.Warn("ops: admin action refused by the access rules", "action", action,
		"identities", ids, "client", r.RemoteAddr)
	writeError(w, http.StatusForbidden, fmt.Sprintf(`client %s may not %s: a membership change needs an admin grant of every lock (the prefix "")`, who, action))
	return false
}

func (h *handler) memberFail(w http.ResponseWriter, r *http.Request, err error) {
	switch msg := err.Error(); {
	case errors.Is(err, server.ErrNotLeader):
		writeError(w, http.StatusServiceUnavailable, "this node is not the leader: retry against the leader")
	case errors.Is(err, server.ErrMemberExists):
		writeError(w, http.StatusConflict, msg)
	case errors.Is(err, server.ErrNotMember):
		writeError(w, http.StatusNotFound, msg)
	case strings.HasPrefix(msg, "member id") || strings.HasPrefix(msg, "raft address"):
		writeError(w, http.StatusBadRequest, msg)
	default:
		h.fail(w, r, err)
	}
}

// forwardedBy names the follower that sent a request on to the leader.
const forwardedBy = "X-Baton-Forwarded-By"

// toLeader sends r on to the leader when this node is a follower, and
// reports whether it did (or answered 503 for want of a leader). The
// follower has authenticated the caller already (token, or the dashboard's
// login cookie and CSRF token, and its client certificate). The browser's
// Cookie, Origin and Sec-Fetch-* headers, which the follower has checked
// and which name the follower, not the leader, never go on.
//
// Over TLS the request goes on the forward channel (ForwardProtocol) with
// the caller's identity (callerCertHeader, callerAddrHeader) and without
// its Authorization header: no credential ever leaves this node, and the
// leader applies its own rules to the real caller. On plain HTTP there is
// no channel a member could prove itself on, so the request keeps the
// caller's token (a dashboard's gets the admin token), and goes on only to
// a leader on this machine: the token never crosses a network in the clear
// from here.
func (h *handler) toLeader(w http.ResponseWriter, r *http.Request) bool {
	return h.toLeaderAs(w, r, false, nil)
}

// toLeaderAs is toLeader for a request authorized by a login cookie when
// byCookie; a proxied event stream ends when stillAuthorized turns false.
func (h *handler) toLeaderAs(w http.ResponseWriter, r *http.Request, byCookie bool, stillAuthorized func() bool) (sent bool) {
	if h.cluster == nil {
		return false
	}
	addr, self := h.cluster.LeaderOpsAddr()
	if self {
		return false
	}
	if addr == "" {
		writeError(w, http.StatusServiceUnavailable, "no leader is known: the cluster is electing one, or has no quorum")
		return true
	}
	if by := r.Header.Get(forwardedBy); by != "" {
		// Two nodes that each believe the other leads would bounce the
		// request between them: one hop only.
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("leadership is changing: node %s sent this on to %s, which does not lead either; retry", by, h.nodeID))
		return true
	}
	// addr is a current member's advertised ops address (Cluster says
	// so). Over TLS the request goes on the members' forward channel
	// without a credential; on plain HTTP, where no node can prove it is a
	// member, with the caller's own token, which crossed the network in the
	// clear to reach this node already.
	channel := h.proxyScheme == "https"
	target := &url.URL{Scheme: h.proxyScheme, Host: addr}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			hd := pr.Out.Header
			hd.Set(forwardedBy, h.nodeID)
			for _, k := range []string{"Authorization", callerCertHeader, callerAddrHeader,
				"Cookie", "Origin", "Sec-Fetch-Site", "Sec-Fetch-Mode", "Sec-Fetch-Dest", "Sec-Fetch-User", csrfHeader} {
				hd.Del(k)
			}
			switch {
			case channel:
				hd.Set(callerAddrHeader, pr.In.RemoteAddr)
				if cs := pr.In.TLS; cs != nil && len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 {
					hd.Set(callerCertHeader, base64.StdEncoding.EncodeToString(cs.VerifiedChains[0][0].Raw))
				}
			case byCookie:
				hd.Set("Authorization", "Bearer "+h.token)
			default:
				hd.Set("Authorization", pr.In.Header.Get("Authorization"))
			}
		},
		Transport: h.proxyTransport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				// The client left, or a stream was ended on purpose
				// (endWhen): nobody to answer, and its header may be out.
				return
			}
			h.log.Warn("ops: cannot reach the leader", "leader_ops_addr", addr, "err", err)
			writeError(w, http.StatusBadGateway, fmt.Sprintf("leader at %s did not answer: %v", addr, err))
		},
	}
	if r.Method == http.MethodGet && r.URL.EscapedPath() == "/v1/events" {
		// The stream outlives the listener's timeouts, as on the leader:
		// no read deadline, a write deadline per write instead of one for
		// the whole answer, so a client that stops reading is cut.
		rc := http.NewResponseController(w)
		rc.SetReadDeadline(time.Time{})
		w = &deadlineWriter{ResponseWriter: w, rc: rc}
		p.FlushInterval = -1 // ReverseProxy does so for text/event-stream anyway; errors too
		// The stream ends when another node leads (the old leader may
		// live on, streaming nothing of the new term) or the login ends;
		// the client reconnects, through this node to the new leader.
		var stop context.CancelFunc
		r, stop = endWhen(r, func() bool {
			now, self := h.cluster.LeaderOpsAddr()
			return self || now != addr || (stillAuthorized != nil && !stillAuthorized())
		})
		defer stop()
		// A stream cut upstream (the leader went, or the check above) makes
		// ReverseProxy abort the answer: the browser would log a broken
		// chunked encoding. An event stream may end anywhere (an SSE client
		// drops an event cut before its blank line), so end it cleanly
		// instead; the client reconnects with its Last-Event-ID either way.
		defer func() {
			if v := recover(); v != nil && v != http.ErrAbortHandler {
				panic(v)
			}
			sent = true // recovered or not: the stream was answered here
		}()
	}
	p.ServeHTTP(w, r)
	return true
}

// deadlineWriter gives each write of a proxied event stream its own
// deadline.
type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	w.rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
	return w.ResponseWriter.Write(b)
}

func (w *deadlineWriter) Flush() { w.rc.Flush() }

func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// streamCheckEvery is how often a stream in a cluster checks that the node
// it follows still leads.
const streamCheckEvery = 500 * time.Millisecond

// endWhen returns r with a context that is cancelled once gone reports
// true (checked every streamCheckEvery), and the function that stops the
// check, which the caller must call when the request ends.
func endWhen(r *http.Request, gone func() bool) (*http.Request, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	go func() { // ends with ctx: the caller's cancel, or gone
		t := time.NewTicker(streamCheckEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if gone() {
					cancel()
					return
				}
			}
		}
	}()
	return r.WithContext(ctx), cancel
}

// fromFollower returns r as the caller made it when a member sent it on
// over TLS (marked by forwardedBy): with the caller's client certificate
// as the verified peer certificate (the follower verified it; the member
// is trusted to) and the caller's address as RemoteAddr, so that the
// token check is the follower's and every rule, 403 and log line after it
// is about the real caller. forwarded reports whether it was so; when ok
// is false the request has been answered (403: marked over TLS by a
// connection that is not a current member's, checked for every request,
// so that a node removed since its connection opened is refused). On
// plain HTTP the mark only stops a second hop, and proves nothing.
func (h *handler) fromFollower(w http.ResponseWriter, r *http.Request) (caller *http.Request, forwarded, ok bool) {
	certB64, addr := r.Header.Get(callerCertHeader), r.Header.Get(callerAddrHeader)
	if r.TLS == nil || r.Header.Get(forwardedBy) == "" {
		r.Header.Del(callerCertHeader)
		r.Header.Del(callerAddrHeader)
		return r, false, true
	}
	if h.cluster == nil {
		writeError(w, http.StatusForbidden, "this server is standalone: it takes no forwarded requests")
		return nil, false, false
	}
	by, err := h.cluster.Member(r.TLS)
	if err != nil {
		h.log.Warn("ops: forwarded request refused", "err", err, "client", r.RemoteAddr)
		writeError(w, http.StatusForbidden, fmt.Sprintf("forwarded request refused: %v", err))
		return nil, false, false
	}
	cs := tls.ConnectionState{Version: r.TLS.Version, HandshakeComplete: true, CipherSuite: r.TLS.CipherSuite, ServerName: r.TLS.ServerName}
	if certB64 != "" {
		der, err := base64.StdEncoding.DecodeString(certB64)
		var leaf *x509.Certificate
		if err == nil {
			leaf, err = x509.ParseCertificate(der)
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("node %s forwarded an unreadable %s: %v", by, callerCertHeader, err))
			return nil, false, false
		}
		cs.PeerCertificates = []*x509.Certificate{leaf}
		cs.VerifiedChains = [][]*x509.Certificate{{leaf}}
	}
	caller = r.Clone(r.Context())
	caller.TLS = &cs
	if _, _, err := net.SplitHostPort(addr); err == nil {
		caller.RemoteAddr = addr
	}
	caller.Header.Del(callerCertHeader)
	caller.Header.Del(callerAddrHeader)
	h.log.Debug("ops: request forwarded by a member", "node", by, "method", r.Method, "path", r.URL.EscapedPath(),
		"identities", server.VerifiedIdentities(&cs), "client", caller.RemoteAddr)
	return caller, true, true
}
