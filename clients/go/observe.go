package baton

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Observing an election (or any lock) without campaigning. The lock
// protocol has no question "who holds it?": a claim is all a connection
// can make. The answer comes from the server's ops API (GET
// /v1/locks/{name}, and its event stream for the changes), which every
// node of a cluster answers, a follower by asking the leader. So Leader
// and Observe need the ops API's address (WithOpsAddrs) and, where the
// server has one, its admin token (WithAdminToken).

// A Leader is the holder of an election's name: the value it campaigned
// with (the lock's owner text) and the fencing token of its term.
type Leader struct {
	Value string
	Token uint64
}

// ErrNoLeader: Leader found nobody leading the election (nobody holds its
// name).
var ErrNoLeader = errors.New("no leader")

// WithOpsAddrs gives the client the server's ops API, for Leader and
// Observe: host:port (https when WithTLSConfig is set, else http) or an
// http:// or https:// URL, one per node of a cluster, tried in order.
func WithOpsAddrs(addrs ...string) Option {
	return func(s *settings) { s.opsAddrs = append([]string(nil), addrs...) }
}

// WithAdminToken gives the bearer token of the ops API (the server's
// -admin-token-file), for Leader and Observe; "" (the default) sends none.
func WithAdminToken(token string) Option { return func(s *settings) { s.adminToken = token } }

// opsError is an answer of the ops API other than 200 and 404.
type opsError struct {
	url    string
	status int
	msg    string
}

func (e *opsError) Error() string {
	return fmt.Sprintf("ops API %s answered %d: %s", e.url, e.status, e.msg)
}

// opsLockJSON is the part of the ops API's LOCK that tells the holder.
type opsLockJSON struct {
	Name   string `json:"name"`
	Holder *struct {
		Owner string  `json:"owner"`
		Token *uint64 `json:"token"`
	} `json:"holder"`
}

func (l opsLockJSON) leader() (Leader, bool) {
	if l.Holder == nil || l.Holder.Token == nil {
		return Leader{}, false
	}
	return Leader{Value: l.Holder.Owner, Token: *l.Holder.Token}, true
}

// opsBases is the base URL of each ops address, or an error if none is set.
func (c *Client) opsBases() ([]string, error) {
	if len(c.set.opsAddrs) == 0 {
		return nil, badRequest("no ops API address: give WithOpsAddrs (the server's -ops-addr)")
	}
	var out []string
	for _, a := range c.set.opsAddrs {
		if !strings.Contains(a, "://") {
			scheme := "http://"
			if c.set.tlsConfig != nil {
				scheme = "https://"
			}
			a = scheme + a
		}
		out = append(out, strings.TrimSuffix(a, "/"))
	}
	return out, nil
}

// opsHTTP is the HTTP client of the ops API: the client's TLS
// configuration, no pooled connection left behind.
func (c *Client) opsHTTP() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:             http.ProxyFromEnvironment,
		TLSClientConfig:   c.set.tlsConfig,
		DisableKeepAlives: true,
	}}
}

// opsGet sends GET path to the ops API at base.
func (c *Client) opsGet(ctx context.Context, hc *http.Client, base, path string, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, err
	}
	if c.set.adminToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.set.adminToken)
	}
	req.Header.Set("Accept", accept)
	return hc.Do(req)
}

// Leader returns the leader of election name, as the ops API sees it
// now: ErrNoLeader if nobody leads. It needs WithOpsAddrs.
func (c *Client) Leader(ctx context.Context, name string) (Leader, error) {
	bases, err := c.opsBases()
	if err != nil {
		return Leader{}, &opError{op: "leader", name: name, err: err}
	}
	hc := c.opsHTTP()
	defer hc.CloseIdleConnections()
	var errs []error
	for _, base := range bases {
		l, err := c.leaderAt(ctx, hc, base, name)
		if err == nil || errors.Is(err, ErrNoLeader) {
			return l, err
		}
		var oe *opsError
		if errors.As(err, &oe) || ctx.Err() != nil {
			return Leader{}, &opError{op: "leader", name: name, err: err}
		}
		errs = append(errs, err) // not reached: the next node
	}
	return Leader{}, &opError{op: "leader", name: name, err: &noAnswerError{err: errors.Join(errs...)}}
}

func (c *Client) leaderAt(ctx context.Context, hc *http.Client, base, name string) (Leader, error) {
	resp, err := c.opsGet(ctx, hc, base, "/v1/locks/"+url.PathEscape(name), "application/json")
	if err != nil {
		return Leader{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Leader{}, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return Leader{}, ErrNoLeader
	default:
		return Leader{}, newOpsError(base, resp, body)
	}
	var l opsLockJSON
	if err := json.Unmarshal(body, &l); err != nil {
		return Leader{}, fmt.Errorf("ops API %s sent bad JSON: %w", base, err)
	}
	if ld, ok := l.leader(); ok {
		return ld, nil
	}
	return Leader{}, ErrNoLeader
}

func newOpsError(base string, resp *http.Response, body []byte) error {
	var ej struct {
		Error string `json:"error"`
	}
	msg := resp.Status
	if json.Unmarshal(body, &ej) == nil && ej.Error != "" {
		msg = ej.Error
	}
	return &opsError{url: base, status: resp.StatusCode, msg: msg}
}

// Observe follows election name without campaigning, as etcd's Observe
// does: the channel gets the leader when Observe starts (if one leads),
// then every new leader as it is granted the name, each once, in order;
// it is closed when ctx ends. It follows the ops API's event stream,
// reconnecting by itself (to the next address first) with the client's
// backoff, and reports each lost stream to WithRetryFunc and the logger.
// The first question is asked before Observe returns: an error then (no
// ops address, a refused token, no node reachable) is returned, with a nil
// channel. It needs WithOpsAddrs.
//
// A leader that resigns with nobody waiting is not reported; the next
// leader is. Ask Leader for who leads now.
func (c *Client) Observe(ctx context.Context, name string) (<-chan Leader, error) {
	bases, err := c.opsBases()
	if err != nil {
		return nil, &opError{op: "observe", name: name, err: err}
	}
	hc := c.opsHTTP()
	first, err := c.Leader(ctx, name)
	if err != nil && !errors.Is(err, ErrNoLeader) {
		return nil, err
	}
	out := make(chan Leader, 16)
	go func() { // ends with ctx
		defer close(out)
		defer hc.CloseIdleConnections()
		o := observer{c: c, hc: hc, name: name, out: out}
		if err == nil {
			o.send(ctx, first)
		}
		for i, failures := 0, 0; ctx.Err() == nil; i++ {
			base := bases[i%len(bases)]
			lasted, err := o.follow(ctx, base)
			if ctx.Err() != nil {
				return
			}
			if lasted {
				failures = 0
			}
			failures++
			wait := c.set.backoff(failures)
			logAt(c.set.logger, slog.LevelInfo, "baton: election's event stream ended; following it again",
				slog.String("lock", name), slog.String("ops_addr", base), slog.Any("err", err), slog.Duration("after", wait))
			c.set.retried(err, wait)
			if !sleep(ctx, wait) {
				return
			}
		}
	}()
	return out, nil
}

// observer is one Observe's state.
type observer struct {
	c    *Client
	hc   *http.Client
	name string
	out  chan<- Leader
	last Leader
}

// send delivers l unless it is the leader last delivered.
func (o *observer) send(ctx context.Context, l Leader) {
	if l == o.last {
		return
	}
	o.last = l
	select {
	case o.out <- l:
	case <-ctx.Done():
	}
}

// observeIdle is how long the event stream may stay silent: the server
// sends a keepalive every 15s.
const observeIdle = 45 * time.Second

// follow reads the event stream of base for o.name until it ends; lasted
// reports whether it was answered and carried at least one event.
func (o *observer) follow(ctx context.Context, base string) (lasted bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := o.c.opsGet(ctx, o.hc, base, "/v1/events?snapshot=1&lock="+url.QueryEscape(o.name), "text/event-stream")
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return false, newOpsError(base, resp, body)
	}
	idle := time.AfterFunc(observeIdle, cancel)
	defer idle.Stop()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var typ, data string
	for sc.Scan() {
		idle.Reset(observeIdle)
		line := sc.Text()
		if line != "" {
			field, value, _ := strings.Cut(line, ":")
			switch field {
			case "event":
				typ = strings.TrimPrefix(value, " ")
			case "data":
				data = strings.TrimPrefix(value, " ")
			}
			continue
		}
		switch typ {
		case "snapshot", "resync":
			lasted = true
			var st struct {
				Locks []opsLockJSON `json:"locks"`
			}
			if json.Unmarshal([]byte(data), &st) == nil {
				for _, l := range st.Locks {
					if ld, ok := l.leader(); ok && l.Name == o.name {
						o.send(ctx, ld)
					}
				}
			}
		case "granted":
			lasted = true
			var ev struct {
				Lock    string `json:"lock"`
				Session struct {
					Owner string  `json:"owner"`
					Token *uint64 `json:"token"`
				} `json:"session"`
			}
			if json.Unmarshal([]byte(data), &ev) == nil && ev.Lock == o.name && ev.Session.Token != nil {
				o.send(ctx, Leader{Value: ev.Session.Owner, Token: *ev.Session.Token})
			}
		case "shutdown":
			return lasted, ErrShutdown
		}
		typ, data = "", ""
	}
	if err := sc.Err(); err != nil {
		return lasted, fmt.Errorf("event stream from %s broke: %w", base, err)
	}
	return lasted, fmt.Errorf("event stream from %s ended", base)
}
