package cli

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/testcerts"
)

// TestMeasureResumeRate measures how many resumes a `baton serve` takes a
// second, over plain TCP, TLS and mutual TLS: claims of version 3 are
// made, then each is resumed on a new connection (a move: what a leader
// does for every claim that comes back, but for the table's lookup) by 16
// workers in this process; the server's CPU time per resume (from
// /proc/PID/stat) gives what 2 cores take when they do nothing else. A
// figure for docs/benchmarks.md: run with BATON_MEASURE=1.
func TestMeasureResumeRate(t *testing.T) {
	if os.Getenv("BATON_MEASURE") != "1" {
		t.Skip("a measurement: BATON_MEASURE=1")
	}
	const claims, workers = 3000, 16
	ca := testcerts.NewCA(t, "measure")
	dir := t.TempDir()
	sf := ca.Server(t).Write(t, dir, "server")
	caFile := filepath.Join(dir, "ca.pem")
	testcerts.WriteFile(t, caFile, testcerts.Bundle(ca))
	client := ca.Client(t, "worker")
	for _, mode := range []string{"plain", "tls", "mtls"} {
		args := []string{"-max-conns-per-ip=0", "-max-conns-per-identity=0"}
		var cfg *tls.Config
		switch mode {
		case "tls":
			args = append(args, "-tls-cert", sf.Cert, "-tls-key", sf.Key)
			cfg = &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
		case "mtls":
			args = append(args, "-tls-cert", sf.Cert, "-tls-key", sf.Key, "-tls-client-ca", caFile)
			cfg = &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", Certificates: []tls.Certificate{client.TLS}}
		}
		l, sl, proc := standalone(t, filepath.Join(t.TempDir(), "data"), "127.0.0.1:0", args...)
		dial := func() *batontest.Conn {
			nc, err := net.DialTimeout("tcp", sl.Addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if cfg != nil {
				tc := tls.Client(nc, cfg)
				if err := tc.Handshake(); err != nil {
					t.Fatal(err)
				}
				nc = tc
			}
			return batontest.NewConn(t, nc)
		}
		var cls []*batontest.Claim
		var conns []*batontest.Conn
		for i := range claims {
			c := dial()
			name := "m/" + strconv.Itoa(i)
			c.AcquireV3(name, time.Minute, false, 1, false, "")
			cl := &batontest.Claim{Name: name, Lease: time.Minute, Limit: 1}
			if f := c.ReadFrame(5 * time.Second); !cl.Update(f) {
				t.Fatalf("%s: got %v", name, f)
			}
			cls, conns = append(cls, cl), append(conns, c)
		}
		cpu0 := procCPU(proc().Pid)
		start := time.Now()
		var wg sync.WaitGroup
		next := make(chan int, claims)
		for i := range claims {
			next <- i
		}
		close(next)
		var mu sync.Mutex
		var failed int
		for range workers {
			wg.Go(func() {
				for i := range next {
					c := dial()
					c.Write(cls[i].ResumeFrame(t, ""))
					f, err := c.TryReadFrame(5 * time.Second)
					if err != nil || f.Type != wire.TypeAcquired || f.Token != cls[i].ID {
						mu.Lock()
						failed++
						mu.Unlock()
					}
					conns[i].Conn.Close()
					conns[i] = c
				}
			})
		}
		wg.Wait()
		took := time.Since(start)
		cpu := procCPU(proc().Pid) - cpu0
		perResume := cpu / claims
		t.Logf("%s: %d resumes in %v (%.0f a second, %d failed); server CPU %v, %v a resume: 2 cores take about %.0f a second",
			mode, claims, took.Round(time.Millisecond), float64(claims)/took.Seconds(), failed, cpu.Round(time.Millisecond),
			perResume.Round(time.Microsecond), 2/perResume.Seconds())
		for _, c := range conns {
			c.Conn.Close()
		}
		proc().Kill()
		<-l.waited
		l.waited <- nil
	}
}
