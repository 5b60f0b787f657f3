package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBinaryOpsHog: 256 keep-alive connections from one address, each
// sending GET /healthz every 4 s without a credential, held every place of
// the ops listener (-ops-max-conns 256): /metrics, /v1/locks and
// /v1/events then timed out for as long as they ran. Now an idle
// connection gives way to a new one, and one address's connections
// without a credential take at most 32 places: while the hog runs, the
// three answer at once, from another address and from the hog's own, and
// so they do beside 256 connections of one more address whose headers
// never end.
func TestBinaryOpsHog(t *testing.T) {
	t.Parallel()
	const token = "ops-hog-token-of-32-characters-or-more"
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := batonCmd(t, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-log-format=json", "-admin-token-file", tokenFile)
	l := startLogged(t, cmd)
	sl := waitServing(t, l.next)
	go func() { // refusals are logged: keep the server's stderr flowing
		for range l.lines {
		}
	}()
	ops := sl.OpsAddr
	stats := runOpsHog(t, ops, 256, 4*time.Second)
	stats.waitTried(t, 256)

	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 2 * time.Second}
		return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	}
	start := time.Now()
	for round := range 3 { // across more than one of the hog's 4 s periods
		for _, ip := range []string{"127.0.0.2", "127.0.0.1"} {
			if err := checkOps(from(ip), ops, token); err != nil {
				t.Fatalf("round %d from %s, %v into the hog (%s): %v", round+1, ip, time.Since(start).Round(time.Millisecond), stats, err)
			}
		}
		time.Sleep(1500 * time.Millisecond)
	}
	t.Logf("beside the hog (%s): /metrics, /v1/locks and /v1/events answered from both addresses, 3 rounds", stats)

	// Connections that are not idle (headers that never end, cut by the
	// header timeout, 3 s, and opened again) from one more address take
	// at most 32 places, not the rest.
	slow := runSlowHeaders(t, ops, "127.0.0.3", 256)
	slow.waitOpen(t, 32)
	start = time.Now()
	for round := range 8 { // across more than one header timeout
		if err := checkOps(from("127.0.0.2"), ops, token); err != nil {
			t.Fatalf("round %d, %v into %d connections of slow headers (%d refused at once): %v",
				round+1, time.Since(start).Round(time.Millisecond), slow.open.Load(), slow.refused.Load(), err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("beside the keep-alive hog and slow headers from one address (%d open, %d refused at once): answered, 8 rounds", slow.open.Load(), slow.refused.Load())
}

// slowHeaders is n clients of one address that each open a connection to an
// ops listener and send a request line whose headers never end; a client
// whose connection is closed opens another.
type slowHeaders struct {
	open    atomic.Int64 // connections the server has kept open for 500 ms or more
	refused atomic.Int64 // connections the server closed within 500 ms
}

func (s *slowHeaders) waitOpen(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for s.open.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d connections of slow headers open after 20 s", s.open.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func runSlowHeaders(t *testing.T, addr, from string, n int) *slowHeaders {
	t.Helper()
	s := new(slowHeaders)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					return // ctx ended
				}
				io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\n")
				opened := time.Now()
				counted := false
				go func() { <-ctx.Done(); c.Close() }()
				var b [1]byte
				for {
					c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
					if _, err := c.Read(b[:]); err != nil {
						if ne, ok := err.(net.Error); ok && ne.Timeout() {
							if !counted {
								counted = true
								s.open.Add(1)
							}
							continue // still open
						}
						break // closed by the server
					}
				}
				c.Close()
				if counted {
					s.open.Add(-1)
				}
				if time.Since(opened) < 500*time.Millisecond {
					s.refused.Add(1)
					// A pause, for the test machine's sake: an attacker
					// would not, and costs the server an accept each.
					select {
					case <-ctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
				}
			}
		}()
	}
	return s
}

// checkOps asks for /metrics, /v1/locks and a /v1/events stream's first
// line with hc, each within its timeout.
func checkOps(hc *http.Client, ops, token string) error {
	for _, path := range []string{"/metrics", "/v1/locks", "/v1/events"} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ops+path, nil)
		if path != "/metrics" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			cancel()
			return fmt.Errorf("GET %s: %v after %v", path, err, time.Since(start).Round(time.Millisecond))
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusOK || err != nil {
			return fmt.Errorf("GET %s: %d, first line %q, %v", path, resp.StatusCode, line, err)
		}
	}
	return nil
}

// opsHog is n clients that each keep one connection alive to an ops
// listener, sending GET /healthz on it every period, without a
// credential; a client whose connection is closed dials again at its next
// request, as an HTTP client's pool does.
type opsHog struct {
	tried    atomic.Int64 // clients that have made their first request
	holding  atomic.Int64 // clients whose last request was answered
	answered atomic.Int64
	redials  atomic.Int64
}

func (h *opsHog) String() string {
	return fmt.Sprintf("%d of its connections answered last time, %d requests answered, %d redials",
		h.holding.Load(), h.answered.Load(), h.redials.Load())
}

// waitTried waits until n of the hog's clients have made their first
// request (answered or not).
func (h *opsHog) waitTried(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for h.tried.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the hog's clients did not all make a request within 20 s: %s", h)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the hog: %s", h)
}

func runOpsHog(t *testing.T, addr string, n int, period time.Duration) *opsHog {
	t.Helper()
	h := new(opsHog)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var (
				c     net.Conn
				r     *bufio.Reader
				held  bool
				tried bool
			)
			defer func() {
				if c != nil {
					c.Close()
				}
			}()
			for {
				if c == nil {
					var err error
					if c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr); err != nil {
						return // ctx ended
					}
					r = bufio.NewReader(c)
					h.redials.Add(1)
				}
				c.SetDeadline(time.Now().Add(period))
				_, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
				var resp *http.Response
				if err == nil {
					resp, err = http.ReadResponse(r, nil)
				}
				ok := err == nil && resp.StatusCode == http.StatusOK
				if ok {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					h.answered.Add(1)
					ok = !strings.EqualFold(resp.Header.Get("Connection"), "close")
				}
				switch {
				case ok && !held:
					h.holding.Add(1)
				case !ok && held:
					h.holding.Add(-1)
				}
				held = ok
				if !tried {
					tried = true
					h.tried.Add(1)
				}
				if !ok {
					c.Close()
					c = nil
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(period):
				}
			}
		}()
	}
	return h
}

// TestBinaryOpsHogThroughFollower: the hog of TestBinaryOpsHog against
// both a follower's ops listener and the leader's, in a cluster over plain
// HTTP: through the follower, /metrics, /v1/locks and /v1/events (sent on
// to the leader, on connections of the follower's address) answer at
// once.
func TestBinaryOpsHogThroughFollower(t *testing.T) {
	t.Parallel()
	const token = "ops-hog-token-of-32-characters-or-more"
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var procs []*clusterProc
	for attempt := 1; ; attempt++ {
		var ok bool
		if procs, ok = startDashCluster(t, tokenFile); ok {
			break
		}
		if attempt == 3 {
			t.Fatal("three clusters in a row lost a port to another process")
		}
	}
	leader := waitLeader(t, procs)
	var follower *clusterProc
	for _, p := range procs {
		if p != leader {
			follower = p
			break
		}
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(15 * time.Second)
	for checkOps(hc, follower.opsAddr, token) != nil { // the follower learns the leader's ops address
		if time.Now().After(deadline) {
			t.Fatalf("through follower %s: %v", follower.id, checkOps(hc, follower.opsAddr, token))
		}
		time.Sleep(50 * time.Millisecond)
	}
	atFollower, atLeader := runOpsHog(t, follower.opsAddr, 256, 4*time.Second), runOpsHog(t, leader.opsAddr, 256, 4*time.Second)
	atFollower.waitTried(t, 256)
	atLeader.waitTried(t, 256)
	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 2 * time.Second}
		return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	}
	for round := range 3 {
		for _, ip := range []string{"127.0.0.2", "127.0.0.1"} {
			if err := checkOps(from(ip), follower.opsAddr, token); err != nil {
				t.Fatalf("round %d from %s through follower %s (its hog: %s; the leader's: %s): %v", round+1, ip, follower.id, atFollower, atLeader, err)
			}
		}
		time.Sleep(1500 * time.Millisecond)
	}
}
