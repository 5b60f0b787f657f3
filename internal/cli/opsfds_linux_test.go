package cli

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// TestIdleOpsConnectionsLeaveLocksServed: with an open-file limit of
// 1,024, 1,010 idle keep-alive connections to the ops listener must not
// stop the lock sessions: the ops listener caps its connections (the rest
// wait in the kernel's backlog, holding no descriptor) and the protocol
// listener keeps descriptors in reserve. The real binary runs under
// `ulimit -n 1024`, hard and soft, which the Go runtime cannot raise.
func TestIdleOpsConnectionsLeaveLocksServed(t *testing.T) {
	bin := buildBaton(t)
	cmd := batonCmd(t, "-c", `ulimit -n 1024 && exec "$0" "$@"`, bin,
		"serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-shutdown-linger=0s")
	cmd.Path, cmd.Args[0] = "/bin/sh", "sh"
	cmd.Env = append(cmd.Env, "BATON_LOG_FORMAT=json")
	l := startLogged(t, cmd)
	sl := waitServing(t, l.next)

	const idle, sessions = 1010, 50
	var ops []net.Conn
	t.Cleanup(func() {
		for _, c := range ops {
			c.Close()
		}
	})
	for i := range idle {
		c, err := net.DialTimeout("tcp", sl.OpsAddr, 5*time.Second)
		if err != nil {
			t.Fatalf("ops connection %d: %v", i, err)
		}
		ops = append(ops, c)
		// A request on each, answered or waiting to be accepted; then the
		// connection stays open, idle, as a keep-alive client leaves it.
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	}
	time.Sleep(500 * time.Millisecond) // the server accepts what it will

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []string
	)
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(err error) {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("session %d: %v", i, err))
				mu.Unlock()
			}
			c, err := net.DialTimeout("tcp", sl.Addr, 5*time.Second)
			if err != nil {
				fail(err)
				return
			}
			defer c.Close()
			frame, _ := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 30000, Name: fmt.Sprint("jobs/", i)})
			c.Write(frame)
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			var reply [12]byte
			if _, err := io.ReadFull(c, reply[:]); err != nil {
				fail(err)
				return
			}
			if wire.Type(reply[0]) != wire.TypeAcquired {
				fail(fmt.Errorf("reply % x, want ACQUIRED", reply))
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d of %d lock sessions not answered beside %d idle ops connections:\n%s\nlog:\n%s",
			len(failed), sessions, idle, strings.Join(failed[:min(5, len(failed))], "\n"), strings.Join(l.seen, "\n"))
	}
}
