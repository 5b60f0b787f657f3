package ops

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/batonlock/baton/internal/hidden"
)

// The dashboard's files, served at / and /ui/.
//
//go:embed ui
var uiFiles embed.FS

const (
	// cookieName holds a dashboard login session's id.
	cookieName = "baton_session"
	// csrfHeader must carry the session's CSRF token on every state-changing
	// request authenticated by the cookie.
	csrfHeader = "X-Baton-CSRF"
	// uiSessionTTL is how long a dashboard login lasts.
	uiSessionTTL = 12 * time.Hour
	// maxUISessions bounds the login sessions kept in memory.
	maxUISessions = 10000
	// maxUISessionsPerIdentity bounds the login sessions of one caller (the
	// identities of its client certificate; all callers without one are
	// one): its next login ends its oldest session, so that one caller can
	// neither fill maxUISessions nor lock itself out.
	maxUISessionsPerIdentity = 16
)

// hiddenScript is the module that gives the page the characters it must
// show escaped: made from the rule the operator commands use
// (internal/hidden), so that both show a name alike.
const hiddenScript = "ui/hidden.js"

// contentSecurityPolicy allows the dashboard only its own files and API.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// uiSession is one dashboard login.
type uiSession struct {
	csrf    string
	expires time.Time
	// caller is who logged in (callerKey): the session is honoured only for
	// requests with the same certificate identities.
	caller string
}

// uiSessions are the dashboard logins, by the digest of their cookie's id
// (so a timing leak of the map lookup says nothing about a live id).
type uiSessions struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]uiSession
	// byCaller lists each caller's sessions, oldest first.
	byCaller map[string][][sha256.Size]byte
}

func randomID() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create logs caller in, ending its oldest session if it has
// maxUISessionsPerIdentity already; ok is false when maxUISessions are
// open (after the expired ones are dropped).
func (u *uiSessions) create(now time.Time, caller string) (id string, s uiSession, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = make(map[[sha256.Size]byte]uiSession)
		u.byCaller = make(map[string][][sha256.Size]byte)
	}
	if mine := u.byCaller[caller]; len(mine) >= maxUISessionsPerIdentity {
		u.removeLocked(mine[0])
	}
	if len(u.m) >= maxUISessions {
		for k, v := range u.m {
			if now.After(v.expires) {
				u.removeLocked(k)
			}
		}
		if len(u.m) >= maxUISessions {
			return "", uiSession{}, false
		}
	}
	id = randomID()
	s = uiSession{csrf: randomID(), expires: now.Add(uiSessionTTL), caller: caller}
	k := sha256.Sum256([]byte(id))
	u.m[k] = s
	u.byCaller[caller] = append(u.byCaller[caller], k)
	return id, s, true
}

// get returns the live session that id names, if caller is the one who
// opened it.
func (u *uiSessions) get(id string, now time.Time, caller string) (uiSession, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	k := sha256.Sum256([]byte(id))
	s, ok := u.m[k]
	if !ok {
		return uiSession{}, false
	}
	if now.After(s.expires) {
		u.removeLocked(k)
		return uiSession{}, false
	}
	if s.caller != caller {
		return uiSession{}, false
	}
	return s, true
}

func (u *uiSessions) remove(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.removeLocked(sha256.Sum256([]byte(id)))
}

// removeLocked ends session k. u.mu must be held.
func (u *uiSessions) removeLocked(k [sha256.Size]byte) {
	s, ok := u.m[k]
	if !ok {
		return
	}
	delete(u.m, k)
	mine := u.byCaller[s.caller]
	for i := range mine {
		if mine[i] == k {
			mine = append(mine[:i], mine[i+1:]...)
			break
		}
	}
	if len(mine) == 0 {
		delete(u.byCaller, s.caller)
	} else {
		u.byCaller[s.caller] = mine
	}
}

// callerKey names r's caller for its dashboard sessions: the identities
// of its verified client certificate, "" without one.
func callerKey(r *http.Request) string {
	return strings.Join(callerIdentities(r), "\x00")
}

// cookieSession is the live login session r's cookie names, if any.
func (h *handler) cookieSession(r *http.Request) (id string, s uiSession, ok bool) {
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return "", uiSession{}, false
	}
	s, ok = h.ui.get(c.Value, time.Now(), callerKey(r))
	return c.Value, s, ok
}

// crossSite says why r, a state-changing request, must be refused as a
// possible cross-site forgery; "" if it is not one. Browsers send
// Sec-Fetch-Site and Origin on such requests; tools such as curl send
// neither and are not affected.
func crossSite(r *http.Request) string {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return "a " + site + " request may not change state (Sec-Fetch-Site: " + site + ")"
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := urlParse(o)
		if err != nil || u != r.Host {
			return fmt.Sprintf("origin %q is not this server (%s)", o, r.Host)
		}
	}
	return ""
}

// urlParse returns the host[:port] of an Origin header's value.
func urlParse(origin string) (string, error) {
	scheme, rest, ok := strings.Cut(origin, "://")
	if !ok || (scheme != "http" && scheme != "https") || rest == "" || strings.ContainsAny(rest, "/?#@") {
		return "", fmt.Errorf("bad origin %q", origin)
	}
	return rest, nil
}

// rebound reports whether a browser reached this server under a name that is
// not an address or localhost while no token protects it: a page can rebind
// its own DNS name to 127.0.0.1 and so become "same-origin". Tools send no
// Sec-Fetch-Site and are not affected.
func rebound(r *http.Request) bool {
	if r.Header.Get("Sec-Fetch-Site") == "" && r.Header.Get("Origin") == "" {
		return false
	}
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	host = strings.Trim(host, "[]")
	return net.ParseIP(host) == nil && host != "localhost"
}

// serveUI serves the dashboard's files and its login endpoints.
func (h *handler) serveUI(w http.ResponseWriter, r *http.Request, p string) {
	switch p {
	case "/ui/session":
		if allow(w, r, methodsGet) {
			h.uiSessionInfo(w, r)
		}
		return
	case "/ui/login":
		if allow(w, r, methodsPost) {
			h.login(w, r)
		}
		return
	case "/ui/logout":
		if allow(w, r, methodsPost) {
			h.logout(w, r)
		}
		return
	}
	if !allow(w, r, methodsGet) {
		return
	}
	name := "ui/index.html"
	if p != "/" {
		name = path.Clean(strings.TrimPrefix(p, "/"))
	}
	data, err := fs.ReadFile(uiFiles, name)
	if name == hiddenScript {
		data, err = []byte(hidden.Script()), nil
	}
	if err != nil || !strings.HasPrefix(name, "ui/") {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s", p))
		return
	}
	hd := w.Header()
	switch path.Ext(name) {
	case ".html":
		hd.Set("Content-Type", "text/html; charset=utf-8")
	case ".js":
		hd.Set("Content-Type", "text/javascript; charset=utf-8")
	case ".css":
		hd.Set("Content-Type", "text/css; charset=utf-8")
	case ".svg":
		hd.Set("Content-Type", "image/svg+xml")
	default:
		hd.Set("Content-Type", "application/octet-stream")
	}
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(data)
	}
}

type uiSessionJSON struct {
	AuthRequired bool   `json:"auth_required"`
	LoggedIn     bool   `json:"logged_in"`
	CSRF         string `json:"csrf,omitempty"`
}

// uiSessionInfo tells the page whether it must log in, and its CSRF token.
// No CORS header is ever sent, so another site cannot read the token.
func (h *handler) uiSessionInfo(w http.ResponseWriter, r *http.Request) {
	out := uiSessionJSON{AuthRequired: h.auth}
	if _, s, ok := h.cookieSession(r); ok {
		out.LoggedIn, out.CSRF = true, s.csrf
	}
	writeJSON(w, http.StatusOK, out)
}

// login trades the admin token for a session cookie.
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	if why := crossSite(r); why != "" {
		h.refuseForgery(w, r, why)
		return
	}
	if !h.auth {
		writeError(w, http.StatusBadRequest, "this server has no admin token: the dashboard needs no login")
		return
	}
	// The token alone opens nothing where /v1/ needs a certificate too (a
	// session it opened would be of no use, and would fill the sessions),
	// and without a certificate the login says nothing of the token.
	if h.requireCert && callerIdentities(r) == nil {
		h.refuse(refusedClientCert, "ops: dashboard login without a verified client certificate", "client", r.RemoteAddr)
		writeError(w, http.StatusUnauthorized, "a verified client certificate is required")
		return
	}
	var in struct {
		Token string `json:"token"`
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("login body over %d bytes", maxBody))
		return
	}
	if err := json.Unmarshal(body, &in); err != nil || in.Token == "" {
		writeError(w, http.StatusBadRequest, `login needs a JSON body {"token": "..."}`)
		return
	}
	d := sha256.Sum256([]byte(in.Token))
	if subtle.ConstantTimeCompare(d[:], h.digest[:]) != 1 {
		h.refuse(refusedToken, "ops: dashboard login with a wrong token", "client", r.RemoteAddr)
		writeError(w, http.StatusUnauthorized, "wrong admin token")
		return
	}
	id, s, ok := h.ui.create(time.Now(), callerKey(r))
	if !ok {
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("%d dashboard sessions are open: try later", maxUISessions))
		return
	}
	trust(r.Context())
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: id, Path: "/", MaxAge: int(uiSessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	h.log.Info("ops: dashboard login", "identities", callerIdentities(r), "client", r.RemoteAddr)
	writeJSON(w, http.StatusOK, uiSessionJSON{AuthRequired: true, LoggedIn: true, CSRF: s.csrf})
}

func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	if why := crossSite(r); why != "" {
		h.refuseForgery(w, r, why)
		return
	}
	if id, _, ok := h.cookieSession(r); ok {
		h.ui.remove(id)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	writeJSON(w, http.StatusOK, uiSessionJSON{AuthRequired: h.auth})
}

func (h *handler) refuseForgery(w http.ResponseWriter, r *http.Request, why string) {
	h.refuse(refusedForgery, "ops: cross-site request refused", "reason", why,
		"method", r.Method, "path", r.URL.EscapedPath(), "client", r.RemoteAddr)
	writeError(w, http.StatusForbidden, why)
}
