package cli

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/testcerts"
)

// startLimited starts the real baton serve under ulimit -n limit with
// args, and returns its serving line and its log lines so far (up to it).
func startLimited(t *testing.T, limit int, args ...string) (servingLine, []string) {
	t.Helper()
	bin := buildBaton(t)
	cmd := exec.Command("sh", append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, limit), bin, "serve",
		"-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-log-format=json", "-data-dir", t.TempDir()}, args...)...)
	l := startLogged(t, cmd)
	sl := waitServing(t, l.next)
	seen := append([]string(nil), l.seen...)
	go func() { // refusals are logged: keep the server's stderr flowing
		for range l.lines {
		}
	}()
	return sl, seen
}

// floodSessions opens n sessions, each from one of the addresses from, in
// turn, with dial (plain or TLS), each claiming a lock of its own, and
// returns how many were granted (and are kept open until the test ends)
// and how many were refused, by how.
func floodSessions(t *testing.T, n int, from []string, dial func(local net.Addr) (net.Conn, error)) (granted int, refused map[string]int) {
	t.Helper()
	var (
		mu   sync.Mutex
		open []net.Conn
		wg   sync.WaitGroup
	)
	refused = make(map[string]int)
	t.Cleanup(func() {
		for _, c := range open {
			c.Close()
		}
	})
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				local := &net.TCPAddr{IP: net.ParseIP(from[i%len(from)])}
				how := "granted"
				c, err := dial(local)
				if err == nil {
					b, _ := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 30000, Name: fmt.Sprint("flood/", i)})
					c.Write(b)
					var f *frame
					if f, err = readOneFrame(c, 10*time.Second); err == nil && f.typ != wire.TypeAcquired {
						how = f.String()
					}
				}
				if err != nil {
					how = "closed unanswered"
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						how = "not answered within 10 s"
					}
				}
				mu.Lock()
				if how == "granted" {
					open = append(open, c)
					granted++
				} else {
					refused[how]++
					if c != nil {
						c.Close()
					}
				}
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return granted, refused
}

// TestBinaryConnsPerIPByDefault: with the defaults, one address cannot
// take a server's descriptors: under ulimit -n 512, -max-conns-per-ip
// (1024) is lowered to 128, with a warn line; 600 sessions from one
// address get 128 granted and the rest closed at once, and a client of
// another address is served.
func TestBinaryConnsPerIPByDefault(t *testing.T) {
	t.Parallel()
	sl, logged := startLimited(t, 512)
	if !strings.Contains(strings.Join(logged, "\n"), `"msg":"max-conns-per-ip lowered to a quarter of the open-file limit`) {
		t.Errorf("no warn line for the lowered cap; log:\n%s", strings.Join(logged, "\n"))
	}
	granted, refused := floodSessions(t, 600, []string{"127.0.0.1"}, func(local net.Addr) (net.Conn, error) {
		return (&net.Dialer{LocalAddr: local, Timeout: 5 * time.Second}).Dial("tcp", sl.Addr)
	})
	t.Logf("600 sessions from one address: %d granted, refused %v", granted, refused)
	if granted != 128 {
		t.Errorf("%d of 600 sessions from one address granted, want 128 (a quarter of 512)", granted)
	}
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}).Dial("tcp", sl.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, _ := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 30000, Name: "other-team/job"})
	c.Write(b)
	if f, err := readOneFrame(c, 5*time.Second); err != nil || f.typ != wire.TypeAcquired {
		t.Fatalf("a client of another address beside the flood: %v %v, want ACQUIRED", f, err)
	}
}

// TestBinaryConnsPerIdentity: a client certificate shared by many hosts is
// one client. Its 600 TLS sessions from 8 addresses (each under the cap per
// address) took every descriptor of a server under ulimit -n 512, and
// another team's claims timed out in the TLS handshake. -max-conns-per-
// identity (4096, lowered to 128 here) grants it 128 and answers the rest
// ERROR OVERLOADED, naming the identity; the other team is served.
func TestBinaryConnsPerIdentity(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	sl, logged := startLimited(t, 512, "-tls-cert", p.server.Cert, "-tls-key", p.server.Key, "-tls-client-ca", p.bundle)
	var serving struct {
		PerID int `json:"max_conns_per_identity"`
	}
	json.Unmarshal([]byte(logged[len(logged)-1]), &serving)
	if serving.PerID != 128 {
		t.Errorf("baton serving line says max_conns_per_identity %d, want 128: %s", serving.PerID, logged[len(logged)-1])
	}
	tlsFor := func(f testcerts.Files) *tls.Config {
		c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			t.Fatal(err)
		}
		return &tls.Config{RootCAs: p.ca.Pool(), Certificates: []tls.Certificate{c}}
	}
	worker := tlsFor(p.worker)
	var hosts []string
	for i := range 8 {
		hosts = append(hosts, fmt.Sprintf("127.0.0.%d", 21+i))
	}
	granted, refused := floodSessions(t, 600, hosts, func(local net.Addr) (net.Conn, error) {
		c, err := tls.DialWithDialer(&net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}, "tcp", sl.Addr, worker)
		if err != nil {
			return nil, err // not a nil *tls.Conn in an interface
		}
		return c, nil
	})
	t.Logf("600 sessions of one certificate from 8 addresses: %d granted, refused %v", granted, refused)
	const want = `ERROR "client identity \"worker\" has 128 connections open, the most one client identity may (max-conns-per-identity)"`
	if granted != 128 || refused[want] != 600-128 {
		t.Errorf("%d of 600 sessions of one certificate granted, refused %v; want 128, and %d refused with %s", granted, refused, 600-128, want)
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", sl.Addr, tlsFor(p.teamB))
	if err != nil {
		t.Fatalf("another team's TLS handshake beside the flood: %v", err)
	}
	defer c.Close()
	b, _ := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 30000, Name: "jobs/team-b"})
	c.Write(b)
	if f, err := readOneFrame(c, 5*time.Second); err != nil || f.typ != wire.TypeAcquired {
		t.Fatalf("another team's claim beside the flood: %v %v, want ACQUIRED", f, err)
	}
}
