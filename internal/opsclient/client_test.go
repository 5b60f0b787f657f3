package opsclient

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/batonlock/baton/clients/go/wire"
)

// TestFollowsTheNodeThatAnswers: a node that refuses connections is
// skipped for the next, which is asked first from then on.
func TestFollowsTheNodeThatAnswers(t *testing.T) {
	t.Parallel()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	hits := 0
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		w.Write([]byte(`{"locks":[]}`))
	}))
	defer live.Close()
	c := New(deadAddr+","+live.Listener.Addr().String(), "", nil)
	for range 2 {
		body, err := c.Do(context.Background(), http.MethodGet, "/v1/locks")
		if err != nil || string(body) != `{"locks":[]}` {
			t.Fatalf("Do = %q, %v; want the live node's answer", body, err)
		}
	}
	if got := c.base(); got != "http://"+live.Listener.Addr().String() {
		t.Errorf("after an answer the client asks %s first, want the node that answered", got)
	}
	if hits != 2 {
		t.Errorf("the live node got %d requests, want 2", hits)
	}
}

// TestAPIErrors: the API's answers other than 200 say what to do.
func TestAPIErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/unauthorized":
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":"no token"}`))
		default:
			w.WriteHeader(http.StatusTeapot)
			w.Write([]byte("short and stout\nsecond line"))
		}
	}))
	defer srv.Close()
	c := New(srv.Listener.Addr().String(), "", nil)
	_, err := c.Do(context.Background(), http.MethodGet, "/unauthorized")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || err.Error() != "unauthorized: set BATON_ADMIN_TOKEN or -admin-token-file" {
		t.Errorf("401 without a token: %v", err)
	}
	_, err = c.Do(context.Background(), http.MethodGet, "/other")
	if want := "answered 418: 418 I'm a teapot short and stout"; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("418: %v, want it to end %q", err, want)
	}
}

// TestLockPortIsNamed: an ops request answered with a lock protocol ERROR
// says that the address is a lock port.
func TestLockPortIsNamed(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write(wire.AppendError(nil, wire.CodeProtocol, "bad frame"))
	}()
	c := New(ln.Addr().String(), "", nil)
	_, err = c.Do(context.Background(), http.MethodGet, "/v1/locks")
	var lp *LockPortError
	if !errors.As(err, &lp) || !strings.Contains(err.Error(), "is Baton's lock protocol port, not its ops HTTP port (it answered a lock protocol ERROR PROTOCOL (bad frame))") {
		t.Errorf("Do against a lock port: %v", err)
	}
}
