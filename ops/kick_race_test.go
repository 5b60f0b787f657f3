package ops_test

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/testcerts"
	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/server"
)

// TestKickRaceAttack is the attack of a caller that may not kick: session
// ids are sequential and GET /v1/locks shows them, so it aims its kicks
// at the next ids, hoping to catch a session after a check of the access
// rules and before the kick. New waiters keep joining a lock it has no
// admin grant for. None may ever be kicked: every answer is 403 (the
// waiter is there) or 404 (not yet), and the refusals are logged with the
// caller's identity.
func TestKickRaceAttack(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	acl, err := server.ParseACL([]byte(`{"rules": [
		{"clients": ["oncall"], "admin": [""]},
		{"clients": ["mallory"], "locks": ["jobs/"]}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	ts := batontest.StartServer(t)
	var logs syncBuffer
	o := serveTLS(t, ca, true, ops.Config{Backend: ts.Srv, ACL: func() *server.ACL { return acl },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	mallory := ca.Client(t, "mallory")
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: 16,
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &mallory.TLS, nil
		}},
	}}
	t.Cleanup(client.CloseIdleConnections)
	post := func(path string) int {
		resp, err := client.Post(o.url+path, "", nil)
		if err != nil {
			t.Error(err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// highestID is what the attacker learns from the locks it may read.
	highestID := func() uint64 {
		resp, err := client.Get(o.url + "/v1/locks")
		if err != nil {
			t.Error(err)
			return 0
		}
		defer resp.Body.Close()
		var body struct {
			Locks []struct {
				Holder  *struct{ ID string }  `json:"holder"`
				Waiters []struct{ ID string } `json:"waiters"`
			} `json:"locks"`
		}
		json.NewDecoder(resp.Body).Decode(&body)
		var top uint64
		for _, l := range body.Locks {
			ids := l.Waiters
			if l.Holder != nil {
				ids = append(ids, *l.Holder)
			}
			for _, s := range ids {
				if n, _ := strconv.ParseUint(s.ID, 10, 64); n > top {
					top = n
				}
			}
		}
		return top
	}

	holdLock(t, ts, "payroll/run")
	// A table of some size, as in production: a snapshot of it takes a
	// while, and an ACQUIRE waiting for the table meanwhile lands right
	// after it.
	holdLock(t, ts, "batch/queue")
	for i := range 1500 {
		c := batontest.Dial(t, ts.Addr)
		c.Acquire("batch/queue", time.Minute, false, "batch-"+strconv.Itoa(i))
	}
	batontest.Eventually(t, 10*time.Second, func() bool {
		l, _ := ts.Srv.Lock("batch/queue")
		return len(l.Waiters) == 1500
	}, "1500 waiters of batch/queue not queued")
	var (
		stop     atomic.Bool
		kicks    atomic.Int64
		statuses sync.Map // status -> count
		wg       sync.WaitGroup
	)
	const attackers = 6
	for a := range attackers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				next := highestID() + 1 + uint64(a%3)
				for range 20 {
					st := post(fmt.Sprintf("/v1/sessions/%d/kick", next))
					kicks.Add(1)
					n, _ := statuses.LoadOrStore(st, new(atomic.Int64))
					n.(*atomic.Int64).Add(1)
					if st != http.StatusNotFound || stop.Load() {
						break
					}
				}
			}
		}()
	}
	// The victims: waiters that join one after another, each with the
	// next id.
	var victims []*batontest.Conn
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) && len(victims) < 400 {
		c := batontest.Dial(t, ts.Addr)
		c.Acquire("payroll/run", time.Minute, false, "victim-"+strconv.Itoa(len(victims)))
		if f := c.ReadFrame(5 * time.Second); f.Type != wire.TypeWaiting {
			t.Fatalf("victim %d: got %v, want WAITING", len(victims), f)
		}
		victims = append(victims, c)
	}
	stop.Store(true)
	wg.Wait()

	l, _ := ts.Srv.Lock("payroll/run")
	var got []string
	statuses.Range(func(k, v any) bool {
		got = append(got, fmt.Sprintf("%v:%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	t.Logf("%d victims joined, %d kicks sent, answers %v", len(victims), kicks.Load(), got)
	if kicked := len(victims) - len(l.Waiters); kicked != 0 {
		t.Fatalf("%d of %d waiters kicked by a caller without an admin grant (answers %v)", kicked, len(victims), got)
	}
	statuses.Range(func(k, v any) bool {
		if st := k.(int); st != http.StatusForbidden && st != http.StatusNotFound {
			t.Errorf("%d kicks answered %d, want only 403 and 404", v.(*atomic.Int64).Load(), st)
		}
		return true
	})
	if n, ok := statuses.Load(http.StatusForbidden); !ok || n.(*atomic.Int64).Load() == 0 {
		t.Errorf("no kick was refused with 403: the attack never aimed at a waiter")
	}
	logs.mu.Lock()
	text := logs.b.String()
	logs.mu.Unlock()
	if !strings.Contains(text, `identities=[mallory]`) {
		t.Errorf("no refusal logged with the caller's identity:\n%.2000s", text)
	}
}
