package cli

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/testcerts"
)

// TestBinaryEventStreamsPerCaller: a reader with the admin token (a client
// certificate without an admin grant) could open all 128 event streams,
// and the operators none. One caller now keeps at most 32, readers
// together at most 112, and the last 16 are kept for callers with an
// admin grant.
func TestBinaryEventStreamsPerCaller(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	readers := make([]testcerts.Files, 4)
	for i := range readers {
		name := fmt.Sprintf("reader-%d", i+1)
		readers[i] = p.ca.Client(t, name).Write(t, p.dir, name)
	}
	serve := batonCmd(t, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-shutdown-linger=0s",
		"-tls-cert", p.server.Cert, "-tls-key", p.server.Key, "-tls-client-ca", p.bundle,
		"-ops-tls-client-ca", p.caFile, "-acl-file", p.acl, "-admin-token-file", p.token, "-log-format=json")
	logs := startLogged(t, serve)
	sl := waitServing(t, logs.next)
	go func() { // refusals are logged: keep the server's stderr flowing
		for range logs.lines {
		}
	}()

	var open []io.Closer
	t.Cleanup(func() {
		for _, c := range open {
			c.Close()
		}
	})
	clientAs := func(cert testcerts.Files) *http.Client {
		c, err := tls.LoadX509KeyPair(cert.Cert, cert.Key)
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.ca.Pool(), Certificates: []tls.Certificate{c}}}}
	}
	// stream opens one stream as hc's caller and returns its status; a
	// stream answered 200 stays open until the test ends.
	stream := func(hc *http.Client) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "https://"+sl.OpsAddr+"/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+p.tokenText)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			open = append(open, resp.Body)
			return resp.StatusCode, ""
		}
		var e struct{ Error string }
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		return resp.StatusCode, e.Error
	}
	// openAll opens streams as cert's caller until one is refused, and
	// returns how many were opened and the refusal.
	openAll := func(cert testcerts.Files) (int, int, string) {
		hc := clientAs(cert)
		for n := 0; n < 200; n++ {
			if code, body := stream(hc); code != http.StatusOK {
				return n, code, body
			}
		}
		return 200, 0, ""
	}

	start := time.Now()
	n, code, body := openAll(readers[0])
	if n != 32 || code != http.StatusTooManyRequests || !strings.Contains(body, `client identity "reader-1" has 32 event streams open, the most one caller may`) {
		t.Fatalf("reader-1 opened %d streams, then %d %s; want 32, then 429 naming it", n, code, body)
	}
	total := n
	for _, r := range readers[1:] {
		n, code, body = openAll(r)
		total += n
		if code == http.StatusServiceUnavailable {
			break
		}
	}
	if total != 112 || code != http.StatusServiceUnavailable || !strings.Contains(body, "the last 16 of 128 are kept for callers with an admin grant") {
		t.Fatalf("readers opened %d streams in all, then %d %s; want 112, then 503 naming the room kept for admins", total, code, body)
	}
	if code, body := stream(clientAs(p.operator)); code != http.StatusOK {
		t.Fatalf("operator's stream beside %d of the readers': %d %s, want 200", total, code, body)
	}
	t.Logf("%d streams opened in %v", total+1, time.Since(start).Round(time.Millisecond))
}

// TestBinaryClusterEventStreamsPerCaller: in a cluster every event stream
// is the leader's (a follower passes it on, with its caller's identity), so
// one caller's 32 are the cluster's: a reader that opens streams through
// both followers is refused at its 33rd, wherever it asks.
func TestBinaryClusterEventStreamsPerCaller(t *testing.T) {
	t.Parallel()
	p := newTLSClusterPKI(t)
	reader := p.ca.Client(t, "reader").Write(t, p.dir, "reader")
	leader, followers := startTLSCluster(t, p)
	c, err := tls.LoadX509KeyPair(reader.Cert, reader.Key)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.ca.Pool(), Certificates: []tls.Certificate{c}}}}
	var open []io.Closer
	t.Cleanup(func() {
		for _, c := range open {
			c.Close()
		}
	})
	stream := func(opsAddr string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "https://"+opsAddr+"/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+p.tokenText)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			open = append(open, resp.Body)
			return resp.StatusCode, ""
		}
		var e struct{ Error string }
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		return resp.StatusCode, e.Error
	}
	// A follower knows the leader's ops address a moment after the
	// election.
	for _, f := range followers {
		deadline := time.Now().Add(15 * time.Second)
		for {
			code, body, _ := p.opsCall(t, reader, "GET", f.opsAddr, "/v1/locks", "")
			if code == http.StatusOK {
				break
			}
			if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
				t.Fatalf("GET /v1/locks through follower %s: %d %s", f.id, code, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	opened := 0
	for i := 0; opened < 32 && i < 64; i++ {
		if code, body := stream(followers[i%2].opsAddr); code != http.StatusOK {
			t.Fatalf("stream %d through follower %s: %d %s, want 200", opened+1, followers[i%2].id, code, body)
		}
		opened++
	}
	for _, n := range append(followers, leader) {
		if code, body := stream(n.opsAddr); code != http.StatusTooManyRequests || !strings.Contains(body, `client identity "reader" has 32 event streams open`) {
			t.Errorf("stream 33 through %s (leader %v): %d %s, want 429 for the caller's 32 in the cluster", n.id, n == leader, code, body)
		}
	}
}

// startTLSCluster starts three nodes set up as docs/security.md says (mutual TLS
// on every listener, the access rules and the token of p), and waits for
// the leader to be ready.
func startTLSCluster(t *testing.T, p *tlsClusterPKI) (leader *clusterProc, followers []*clusterProc) {
	t.Helper()
	procs, peers := clusterLayout(t)
	for _, c := range procs {
		c.cmd = batonCmd(t, "serve", "-node-id", c.id, "-raft-addr", c.raftAddr, "-peers", peers,
			"-addr", c.addr, "-ops-addr", c.opsAddr, "-data-dir", c.dataDir, "-shutdown-linger=0s", "-log-format=json",
			"-tls-cert", p.nodes[c.id].Cert, "-tls-key", p.nodes[c.id].Key, "-tls-client-ca", p.caFile,
			"-ops-tls-client-ca", p.caFile, "-acl-file", p.acl, "-admin-token-file", p.token)
		c.log = startLogged(t, c.cmd)
		go func(l *loggedCmd) { // keep each node's stderr flowing
			for range l.lines {
			}
		}(c.log)
	}
	probe := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.ca.Pool()}}}
	deadline := time.Now().Add(30 * time.Second) // elections on a loaded 2-core machine
	for leader == nil && time.Now().Before(deadline) {
		for _, c := range procs {
			if httpGet(t, probe, "https://"+c.opsAddr+"/readyz") == http.StatusOK {
				leader = c
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if leader == nil {
		t.Fatal("no node became a ready leader over TLS")
	}
	for _, c := range procs {
		if c != leader {
			followers = append(followers, c)
		}
	}
	return leader, followers
}
