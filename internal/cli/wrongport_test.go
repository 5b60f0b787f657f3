//go:build unix

package cli

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/runner"
)

// serveBinaryLine starts baton serve (the binary) on loopback ports and
// returns its "baton serving" line.
func serveBinaryLine(t *testing.T, args ...string) servingLine {
	t.Helper()
	cmd := batonCmd(t, append([]string{"serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-shutdown-linger=0s"}, args...)...)
	cmd.Env = append(cmd.Env, "BATON_LOG_FORMAT=json")
	l := startLogged(t, cmd)
	sl := waitServing(t, l.next)
	go func() {
		for range l.lines { // keep the log flowing
		}
	}()
	return sl
}

// TestBinaryWrongPorts: a lock client pointed at the ops port, and an ops
// command pointed at the lock port, are each told at once what they
// reached and where to go.
func TestBinaryWrongPorts(t *testing.T) {
	t.Parallel()
	sl := serveBinaryLine(t)

	t.Run("run at the ops port", func(t *testing.T) {
		start := time.Now()
		code, stdout, stderr := runBaton(t, "run", "-addr", sl.OpsAddr, "jobs/x", "--", "sh", "-c", "echo ran")
		took := time.Since(start)
		if code != runner.ExitUnreachable {
			t.Errorf("exit code %d, want %d", code, runner.ExitUnreachable)
		}
		want := "baton run: server " + sl.OpsAddr + " is not a Baton lock port: this is Baton's ops HTTP port; the lock protocol is on " + sl.Addr + "\n"
		if stderr != want {
			t.Errorf("stderr %q, want %q", stderr, want)
		}
		if stdout != "" {
			t.Errorf("stdout %q: the command ran", stdout)
		}
		// The answer is immediate: an HTTP server would wait for a request
		// line until its header timeout (3s).
		if took > 2500*time.Millisecond {
			t.Errorf("took %v, want an answer at once", took)
		}
	})

	t.Run("the Go client at the ops port", func(t *testing.T) {
		c, err := baton.New([]string{sl.OpsAddr})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := c.Acquire(ctx, "jobs/x")
		if err == nil {
			l.Release()
			t.Fatal("Acquire at the ops port succeeded")
		}
		if !errors.Is(err, baton.ErrWrongPort) || !strings.Contains(err.Error(), "the lock protocol is on "+sl.Addr) {
			t.Errorf("Acquire at the ops port: %v, want ErrWrongPort naming %s", err, sl.Addr)
		}
	})

	t.Run("run at another HTTP server", func(t *testing.T) {
		hs := httptest.NewUnstartedServer(http.NotFoundHandler())
		hs.Config.ReadHeaderTimeout = 500 * time.Millisecond // it answers the frame's bytes then
		hs.Start()
		defer hs.Close()
		addr := strings.TrimPrefix(hs.URL, "http://")
		code, _, stderr := runBaton(t, "run", "-addr", addr, "jobs/x", "--", "sh", "-c", "echo ran")
		want := "baton run: server " + addr + ` is not a Baton lock port: it answered in HTTP ("HTTP/1.1 `
		if code != runner.ExitUnreachable || !strings.HasPrefix(stderr, want) || len(lines(stderr)) != 1 {
			t.Errorf("exit code %d, stderr %q; want 78 and one line starting %q", code, stderr, want)
		}
	})

	t.Run("any client at the ops port", func(t *testing.T) {
		// What a Python or TypeScript client reads: one ERROR frame, then
		// the end of the stream.
		conn, err := net.DialTimeout("tcp", sl.OpsAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		acquire, err := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 2000, Name: "jobs"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(acquire); err != nil {
			t.Fatal(err)
		}
		h, p := readFrame(t, conn)
		we, err := wire.DecodeError(p)
		if h.Type != wire.TypeError || err != nil || we.Code != wire.CodeProtocol ||
			we.Msg != "this is Baton's ops HTTP port; the lock protocol is on "+sl.Addr {
			t.Errorf("answer %v %q (%v), want ERROR PROTOCOL naming %s", h.Type, p, err, sl.Addr)
		}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := conn.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Errorf("after the ERROR: read %d bytes, %v; want the end of the stream", n, err)
		}
	})

	t.Run("HTTP on the ops port still works", func(t *testing.T) {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		if got := httpGet(t, hc, "http://"+sl.OpsAddr+"/healthz"); got != http.StatusOK {
			t.Errorf("GET /healthz: %d, want 200", got)
		}
	})

	for _, cmd := range []string{"locks", "release", "kick"} {
		t.Run(cmd+" at the lock port", func(t *testing.T) {
			args := []string{cmd, "-ops-addr", sl.Addr}
			switch cmd {
			case "release":
				args = append(args, "jobs/x")
			case "kick":
				args = append(args, "7")
			}
			code, stdout, stderr := runBaton(t, args...)
			if code != exitFailure || stdout != "" {
				t.Errorf("exit code %d, stdout %q; want 1, nothing", code, stdout)
			}
			want := "baton " + cmd + ": " + sl.Addr + " is Baton's lock protocol port, not its ops HTTP port " +
				"(it answered a lock protocol ERROR PROTOCOL (frame length "
			if l := lines(stderr); len(l) != 1 || !strings.HasPrefix(l[0], want) ||
				!strings.HasSuffix(l[0], "give -ops-addr the server's -ops-addr (default 127.0.0.1:7071)") {
				t.Errorf("stderr %q, want one line starting %q", stderr, want)
			}
		})
	}
}
