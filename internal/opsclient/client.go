package opsclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// DefaultAddr is where a server's ops API listens unless told otherwise.
const DefaultAddr = "127.0.0.1:7071"

const (
	// requestTimeout bounds one request to the ops API.
	requestTimeout = 10 * time.Second
	// maxAnswer caps an answer read from the ops API.
	maxAnswer = 64 << 20
)

// CheckAddrs refuses an -ops-addr that is neither host:port nor an
// http(s) URL, or a comma-separated list of them (the nodes of a cluster).
func CheckAddrs(list string) error {
	addrs := SplitAddrs(list)
	if len(addrs) == 0 {
		return fmt.Errorf("ops-addr %q names no address", list)
	}
	for _, addr := range addrs {
		if strings.Contains(addr, "://") {
			u, err := url.Parse(addr)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("ops-addr %q is not host:port or an http(s) URL", addr)
			}
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("ops-addr %q is not host:port: %v", addr, err)
		}
	}
	return nil
}

// SplitAddrs splits a comma-separated -ops-addr, dropping empty items.
func SplitAddrs(list string) []string {
	var out []string
	for a := range strings.SplitSeq(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Client makes requests to the ops API of one server, or of the nodes
// of a cluster: a request that gets no answer from one node goes to the
// next (any node answers, a follower by sending it on to the leader).
type Client struct {
	addr  string   // as given, for messages
	bases []string // scheme://host:port of each node, without a trailing /
	token string
	hc    *http.Client

	mu  sync.Mutex
	cur int // index in bases of the node that answered last
}

// New talks to the ops API at addr (a comma-separated list for a
// cluster); a host:port without a scheme is https when tlsCfg is not nil,
// else http.
func New(addr, token string, tlsCfg *tls.Config) *Client {
	var bases []string
	for _, a := range SplitAddrs(addr) {
		base := a
		if !strings.Contains(a, "://") {
			base = "http://" + a
			if tlsCfg != nil {
				base = "https://" + a
			}
		}
		bases = append(bases, strings.TrimSuffix(base, "/"))
	}
	return &Client{
		addr:  addr,
		bases: bases,
		token: token,
		// No keep-alive: one or a few requests, and no idle connection
		// (or its goroutines) left behind.
		hc: &http.Client{Timeout: requestTimeout, Transport: &http.Transport{
			Proxy:             http.ProxyFromEnvironment,
			DialContext:       dialOpsAPI, // wrongport.go
			DisableKeepAlives: true,
			TLSClientConfig:   tlsCfg,
		}},
	}
}

// base is the node to ask first: the one that answered last.
func (c *Client) base() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bases[c.cur]
}

// rotate moves on from base, which gave no answer, to the next node.
func (c *Client) rotate(base string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bases[c.cur] == base {
		c.cur = (c.cur + 1) % len(c.bases)
	}
}

// Do sends one request to path (escaped) and returns the body of a 200
// answer. Other answers are an *APIError; a failure to talk to the API is
// a *ReachError.
func (c *Client) Do(ctx context.Context, method, path string) ([]byte, error) {
	return c.Send(ctx, method, path, nil)
}

// Send is Do with a JSON request body (nil for none). A node that cannot
// be reached is skipped for the next; a request that may have reached a
// node (a timeout after sending) is not sent again unless it is a GET.
func (c *Client) Send(ctx context.Context, method, path string, reqBody []byte) ([]byte, error) {
	var errs []error
	for range c.bases {
		base := c.base()
		body, err := c.sendTo(ctx, base, method, path, reqBody)
		var re *ReachError
		if !errors.As(err, &re) || ctx.Err() != nil || (method != http.MethodGet && !re.unsent()) {
			return body, err
		}
		errs = append(errs, err)
		c.rotate(base)
	}
	if len(errs) == 1 {
		return nil, errs[0]
	}
	return nil, &ReachError{Addr: c.addr, Err: errors.Join(errs...)}
}

// sendTo sends one request to the node at base.
func (c *Client) sendTo(ctx context.Context, base, method, path string, reqBody []byte) ([]byte, error) {
	addr := strings.TrimPrefix(strings.TrimPrefix(base, "http://"), "https://")
	var rd io.Reader
	if reqBody != nil {
		rd = bytes.NewReader(reqBody)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("ops API request %s %s: %v", method, path, err)
	}
	if reqBody != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, &ReachError{Addr: addr, Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, &ReachError{Addr: addr, Err: err}
	}
	if resp.StatusCode == http.StatusOK {
		return body, nil
	}
	return nil, newAPIError(addr, resp, body, c.token != "")
}

// newAPIError is the *APIError of an answer other than 200 with body: the
// API's {"error": ...}, or the first line of what another server (a
// proxy, or Go's HTTPS server asked in plain HTTP: "Client sent an HTTP
// request to an HTTPS server.") answered.
func newAPIError(addr string, resp *http.Response, body []byte, withToken bool) *APIError {
	ae := &APIError{Addr: addr, Status: resp.StatusCode, WithToken: withToken}
	var ej struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &ej) == nil && ej.Error != "" {
		ae.Msg = ej.Error
	} else {
		line, _, _ := bytes.Cut(bytes.TrimSpace(body), []byte("\n"))
		ae.Msg = strings.TrimSpace(resp.Status + " " + TruncateRunes(string(line), 200))
	}
	return ae
}

// APIError is an answer of the ops API other than 200.
type APIError struct {
	Addr      string // the node that answered, host:port
	Status    int    // the HTTP status
	Msg       string // the API's {"error": ...}
	WithToken bool   // a token was sent
}

func (e *APIError) Error() string {
	switch {
	case e.Status == http.StatusUnauthorized && strings.Contains(e.Msg, "client certificate"):
		return fmt.Sprintf("unauthorized: the ops API at %s requires a client certificate: give -tls-cert and -tls-key", e.Addr)
	case e.Status == http.StatusBadRequest && strings.Contains(e.Msg, "HTTPS server"):
		return fmt.Sprintf("the ops API at %s speaks HTTPS: give -tls-ca (or an https:// -ops-addr)", e.Addr)
	case e.Status == http.StatusUnauthorized && !e.WithToken:
		return "unauthorized: set BATON_ADMIN_TOKEN or -admin-token-file"
	case e.Status == http.StatusUnauthorized:
		return fmt.Sprintf("unauthorized: the ops API at %s refused the admin token (%s)", e.Addr, e.Msg)
	case e.Status == http.StatusNotFound, e.Status == http.StatusConflict:
		return e.Msg
	}
	return fmt.Sprintf("the ops API at %s answered %d: %s", e.Addr, e.Status, e.Msg)
}

// ReachError is a request that got no answer.
type ReachError struct {
	Addr string // the node, host:port, or the -ops-addr list when every node failed
	Err  error
}

func (e *ReachError) Error() string {
	var lp *LockPortError
	if errors.As(e.Err, &lp) {
		return lp.Error()
	}
	reason := e.Err.Error()
	var errno syscall.Errno
	var ne net.Error
	switch {
	case errors.As(e.Err, &errno):
		reason = errno.Error()
	case errors.As(e.Err, &ne) && ne.Timeout():
		reason = fmt.Sprintf("no answer within %v", requestTimeout)
	default:
		var ue *url.Error
		if errors.As(e.Err, &ue) {
			reason = ue.Err.Error()
		}
	}
	return fmt.Sprintf("cannot reach the ops API at %s: %s", e.Addr, reason)
}

func (e *ReachError) Unwrap() error { return e.Err }

// unsent reports whether the request never left: the connection was not
// made, so another node may be asked without doing it twice.
func (e *ReachError) unsent() bool {
	var oe *net.OpError
	return errors.As(e.Err, &oe) && oe.Op == "dial"
}

// Addr is the -ops-addr the client was made with, for messages.
func (c *Client) Addr() string { return c.addr }

// Stream opens a GET of path that has no end (an event stream) on the node
// that answered last, with header added, and returns the body of a 200
// answer. It has no overall timeout: the caller ends it through ctx. A
// node that gives no answer, or a transient one, is left for the next on
// the following call.
func (c *Client) Stream(ctx context.Context, path string, header http.Header) (io.ReadCloser, error) {
	base := c.base()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	hc := &http.Client{Transport: c.hc.Transport}
	resp, err := hc.Do(req)
	if err != nil {
		c.rotate(base) // the next node of a cluster, on the next try
		return nil, &ReachError{Addr: c.addr, Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		if Transient(resp.StatusCode) {
			c.rotate(base) // another node may know the new leader first
		}
		return nil, newAPIError(c.addr, resp, body, c.token != "")
	}
	return resp.Body, nil
}

// Transient says whether an answer of the ops API says "not now" rather
// than "never": a cluster electing a leader, or a node forwarding to one
// that went away, answers 502, 503 or 504 until the new leader serves.
func Transient(status int) bool {
	return status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout
}

// TruncateRunes cuts s to at most n runes: what a server sent is quoted
// this short in a message.
func TruncateRunes(s string, n int) string {
	if n < 1 {
		n = 1
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n])
}
