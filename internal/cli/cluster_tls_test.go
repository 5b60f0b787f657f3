package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/testcerts"
)

// TestServeRaftTLSUsageErrors: Raft's TLS flags, and a cluster whose Raft
// port would be plain while a listener speaks TLS, are one line on stderr
// and exit 2, with nothing created.
func TestServeRaftTLSUsageErrors(t *testing.T) {
	t.Parallel()
	cl := []string{"-node-id=n1", "-raft-addr=127.0.0.1:7301", "-peers=n1=127.0.0.1:7301,n2=127.0.0.1:7302,n3=127.0.0.1:7303"}
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"raft cert without key", append([]string{"-raft-tls-cert=a", "-raft-tls-ca=c"}, cl...), nil, "raft-tls-cert and raft-tls-key go together"},
		{"raft key from the environment alone", cl, map[string]string{"BATON_RAFT_TLS_KEY": "k"}, "raft-tls-cert and raft-tls-key go together"},
		{"raft flags without a cluster", []string{"-raft-tls-ca=c"}, nil, "raft-tls-ca, raft-tls-cert and raft-tls-key are for replicated mode"},
		{"protocol TLS, no CA for Raft", append([]string{"-tls-cert=a", "-tls-key=b"}, cl...), nil,
			"replicated mode: the protocol listener speaks TLS but Raft would not: give -raft-tls-ca (or -tls-client-ca)"},
		{"ops TLS, no certificate for Raft", append([]string{"-ops-tls-cert=a", "-ops-tls-key=b"}, cl...), nil,
			"replicated mode: the ops listener speaks TLS but Raft would not: give -raft-tls-cert and -raft-tls-key"},
		{"raft CA without a certificate", append([]string{"-raft-tls-ca=c"}, cl...), nil, "raft-tls-ca needs this node's certificate"},
		{"raft certificate without a CA", append([]string{"-raft-tls-cert=a", "-raft-tls-key=b"}, cl...), nil, "raft-tls-cert needs raft-tls-ca (or tls-client-ca)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dataDir := filepath.Join(t.TempDir(), "data")
			env := map[string]string{"BATON_DATA_DIR": dataDir}
			for k, v := range tt.env {
				env[k] = v
			}
			code, _, stderr := runCLI(t, env, append([]string{"serve", "-addr=127.0.0.1:7101", "-ops-addr=127.0.0.1:7201"}, tt.args...)...)
			if code != exitUsage {
				t.Errorf("exit code %d, want 2", code)
			}
			if l := lines(stderr); len(l) != 1 || !strings.Contains(l[0], tt.want) {
				t.Errorf("stderr %q, want one line with %q", stderr, tt.want)
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Errorf("data directory exists after a usage error (stat: %v)", err)
			}
		})
	}
}

// TestServeRaftTLSBadFiles: a node certificate that names another node,
// or none, and an unusable CA file stop the start with one line naming the
// flag, exit 1, nothing written.
func TestServeRaftTLSBadFiles(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	n2 := p.ca.Node(t, "n2").Write(t, p.dir, "n2")
	n1 := p.ca.Node(t, "n1").Write(t, p.dir, "n1")
	junk := filepath.Join(p.dir, "junk")
	testcerts.WriteFile(t, junk, []byte("no PEM here\n"))
	addrs := freeAddrs(t, 3)
	base := []string{"serve", "-addr", addrs[0], "-ops-addr", addrs[1], "-node-id=n1", "-raft-addr", addrs[2], "-peers", "n1=" + addrs[2]}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"another node's certificate", []string{"-raft-tls-cert", n2.Cert, "-raft-tls-key", n2.Key, "-raft-tls-ca", p.caFile},
			`raft-tls-cert/raft-tls-key ` + n2.Cert + ` names node "n2" (baton://node/n2), but this is node "n1"`},
		{"a certificate without a node", []string{"-tls-cert", p.server.Cert, "-tls-key", p.server.Key, "-tls-client-ca", p.caFile},
			"tls-cert/tls-key (Raft's certificate) " + p.server.Cert + `: certificate "baton test server" names no node (a URI SAN baton://node/%3Cnode-id%3E)`},
		{"CA without PEM", []string{"-raft-tls-cert", n1.Cert, "-raft-tls-key", n1.Key, "-raft-tls-ca", junk}, "raft-tls-ca: CA bundle " + junk + " holds no PEM certificate"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			code, _, stderr := runCLI(t, map[string]string{"BATON_DATA_DIR": dataDir}, append(base, tt.args...)...)
			if code != exitFailure {
				t.Errorf("exit code %d, want 1", code)
			}
			if l := lines(stderr); len(l) != 1 || !strings.HasPrefix(l[0], "baton serve: ") || !strings.Contains(l[0], tt.want) {
				t.Errorf("stderr %q, want one line with %q", stderr, tt.want)
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Errorf("data directory exists after a failed start (stat: %v)", err)
			}
		})
	}
}

// tlsClusterPKI is docs/security.md's set-up for a cluster: one CA for
// everything, each node's certificate for server auth only (the usual
// kind) naming the node by baton://node/<id>, the lock client "worker",
// the operator "operator", access rules and a token.
type tlsClusterPKI struct {
	*pki
	nodes map[string]testcerts.Files
}

func newTLSClusterPKI(t *testing.T) *tlsClusterPKI {
	t.Helper()
	p := &tlsClusterPKI{pki: newPKI(t), nodes: map[string]testcerts.Files{}}
	for _, id := range []string{"n1", "n2", "n3"} {
		p.nodes[id] = p.ca.Node(t, id).Write(t, p.dir, id)
	}
	return p
}

// opsCall sends one request to an ops API over HTTPS as the holder of
// cert (and the token), over a connection of its own; it returns the
// status, the body and the client's own address.
func (p *tlsClusterPKI) opsCall(t *testing.T, cert testcerts.Files, method, opsAddr, path, body string) (int, string, string) {
	t.Helper()
	c, err := tls.LoadX509KeyPair(cert.Cert, cert.Key)
	if err != nil {
		t.Fatal(err)
	}
	var local string
	tr := &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: p.ca.Pool(), Certificates: []tls.Certificate{c}},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				local = conn.LocalAddr().String()
			}
			return conn, err
		}}
	req, _ := http.NewRequest(method, "https://"+opsAddr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+p.tokenText)
	resp, err := (&http.Client{Timeout: 15 * time.Second, Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("%s %s%s: %v", method, opsAddr, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), local
}

// TestBinaryClusterTLS is the attack on a cluster set up as
// docs/security.md says, by a caller with the token and a certificate but no
// admin grant: force-release and membership changes are refused (403)
// through the leader and through a follower alike; the operator's
// force-release through a follower works, and the leader's log line names
// the operator's address. Every proxied request works with server-auth
// only node certificates.
func TestBinaryClusterTLS(t *testing.T) {
	t.Parallel()
	p := newTLSClusterPKI(t)
	procs, peers := clusterLayout(t)
	for _, c := range procs {
		c.cmd = batonCmd(t, "serve", "-node-id", c.id, "-raft-addr", c.raftAddr, "-peers", peers,
			"-addr", c.addr, "-ops-addr", c.opsAddr, "-data-dir", c.dataDir, "-shutdown-linger=0s", "-log-format=json",
			"-tls-cert", p.nodes[c.id].Cert, "-tls-key", p.nodes[c.id].Key, "-tls-client-ca", p.caFile,
			"-ops-tls-client-ca", p.caFile, "-acl-file", p.acl, "-admin-token-file", p.token)
		c.log = startLogged(t, c.cmd)
	}
	probe := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.ca.Pool()}}}
	var leader, follower *clusterProc
	deadline := time.Now().Add(30 * time.Second)
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
			follower = c
			break
		}
	}

	// worker holds jobs/a on the leader.
	wc, err := tls.LoadX509KeyPair(p.worker.Cert, p.worker.Key)
	if err != nil {
		t.Fatal(err)
	}
	client, err := baton.New([]string{leader.addr}, baton.WithTLSConfig(&tls.Config{RootCAs: p.ca.Pool(), Certificates: []tls.Certificate{wc}}),
		baton.WithLease(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held, err := client.Acquire(ctx, "jobs/a")
	if err != nil {
		t.Fatalf("worker acquires jobs/a: %v", err)
	}
	defer held.Release()

	// Reads through the follower reach the leader (node certificates for
	// server auth only).
	// (The follower learns the leader's ops address with the leader's
	// epoch entry: a moment after the election.)
	deadline = time.Now().Add(15 * time.Second)
	for {
		code, body, _ := p.opsCall(t, p.operator, "GET", follower.opsAddr, "/v1/locks", "")
		if code == 200 && strings.Contains(body, `"jobs/a"`) {
			break
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("GET /v1/locks through the follower: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The caller without an admin grant: refused everywhere.
	release := "/v1/locks/" + url.PathEscape("jobs/a") + "/release"
	for _, c := range []*clusterProc{leader, follower} {
		for _, req := range []struct{ method, path, body string }{
			{"POST", release, ""},
			{"POST", "/v1/cluster/members", `{"id": "n9", "raft_addr": "127.0.0.1:1"}`},
			{"DELETE", "/v1/cluster/members/n3", ""},
		} {
			if code, body, _ := p.opsCall(t, p.worker, req.method, c.opsAddr, req.path, req.body); code != 403 {
				t.Errorf("worker %s %s on %s (leader %v): %d %s, want 403", req.method, req.path, c.id, c == leader, code, body)
			}
		}
	}
	if held.Context().Err() != nil {
		t.Fatal("worker's lock ended after refused force-releases")
	}
	code, body, _ := p.opsCall(t, p.operator, "GET", follower.opsAddr, "/v1/cluster", "")
	var view clusterJSONView
	if json.Unmarshal([]byte(body), &view); code != 200 || len(view.Members) != 3 {
		t.Fatalf("membership after refused changes: %d %s, want the 3 founders", code, body)
	}

	// The operator through the follower: done, and logged as the operator.
	code, body, opAddr := p.opsCall(t, p.operator, "POST", follower.opsAddr, release, "")
	if code != 200 {
		t.Fatalf("operator force-releases through the follower: %d %s", code, body)
	}
	select {
	case <-held.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("worker's lock did not end after the operator's force-release")
	}
	leader.log.waitFor(t, "ops: force-released lock")
	line := leader.log.seen[len(leader.log.seen)-1]
	if !strings.Contains(line, `"client":"`+opAddr+`"`) {
		t.Errorf("the leader's force-release line does not name the operator's address %s: %s", opAddr, line)
	}
}
