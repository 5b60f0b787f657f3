package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

const (
	// watchMaxBackoff caps the wait between reconnections of baton watch.
	watchMaxBackoff = 5 * time.Second
	// watchMaxLine caps one line of the event stream.
	watchMaxLine = 1 << 20
)

// opsEvent is OPS.md's EVENT.
type opsEvent struct {
	Seq     uint64     `json:"seq"`
	At      time.Time  `json:"at"`
	Type    string     `json:"type"`
	Lock    string     `json:"lock"`
	Session opsSession `json:"session"`
}

func watchCommand() *command {
	return &command{
		name:    "watch",
		summary: "print lock events as they happen",
		usage:   "baton watch [flags] [NAME]",
		flags:   func() *flag.FlagSet { return newAdminFlags("watch", new(adminOptions)) },
		help: `Follows the server's event stream (GET /v1/events) until interrupted: one
line per event - time, type (queued, granted, released, expired,
force_released, kicked, left), lock, owner, session, and the fencing token
of a holder. With NAME, only that lock's events. -json prints each EVENT as
one line of JSON, for scripts.

A dropped stream is resumed where it stopped (Last-Event-ID), so no event is
lost or repeated. If the server no longer holds the missed events (or it
restarted), a line on stderr says so: re-read 'baton locks'.

` + adminHelp + `
Examples:
  baton watch
  baton watch jobs/nightly
  baton watch -json | jq -c 'select(.type == "expired")'
`,
		run: runWatch,
	}
}

func runWatch(ctx context.Context, s *sys, c *command, args []string) int {
	o, name, ops, code, ok := parseAdmin(s, c, args, "lock name", true)
	if !ok {
		return code
	}
	path := "/v1/events"
	if name != "" {
		path += "?lock=" + url.QueryEscape(name)
	}
	// The stream has no end, so no overall timeout; a dead connection is
	// noticed by the server's keepalives stopping (see watchIdle).
	hc := &http.Client{Transport: ops.hc.Transport}
	w := &watcher{s: s, json: o.json}
	var backoff time.Duration
	for {
		connected, err := w.stream(ctx, hc, ops, path)
		if ctx.Err() != nil {
			return exitOK
		}
		var ae *apiError
		if errors.As(err, &ae) {
			return adminFailed(s, c.name, err) // 401, 404...: retrying will not help
		}
		if connected {
			backoff = 0
		}
		backoff = min(max(2*backoff, 100*time.Millisecond), watchMaxBackoff)
		fmt.Fprintf(s.stderr, "baton watch: %s; reconnecting in %v\n", oneLine(err.Error()), backoff)
		select {
		case <-ctx.Done():
			return exitOK
		case <-time.After(backoff):
		}
	}
}

// watchIdle is how long a stream may stay silent: the server sends a
// keepalive every 15 s.
const watchIdle = 45 * time.Second

type watcher struct {
	s    *sys
	json bool
	last uint64 // the id of the last event seen
	seen bool   // whether last is set
}

// stream follows one connection until it ends; connected reports whether
// the server accepted it.
func (w *watcher) stream(ctx context.Context, hc *http.Client, ops *opsClient, path string) (connected bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	base := ops.base()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return false, err
	}
	if ops.token != "" {
		req.Header.Set("Authorization", "Bearer "+ops.token)
	}
	if w.seen {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(w.last, 10))
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		ops.rotate(base) // the next node of a cluster, on the next try
		return false, &reachError{addr: ops.addr, err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxOpsAnswer))
		ae := &apiError{addr: ops.addr, status: resp.StatusCode, withToken: ops.token != ""}
		var ej struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &ej) == nil && ej.Error != "" {
			ae.msg = ej.Error
		} else {
			ae.msg = resp.Status
		}
		return false, ae
	}
	// A timer that every line pushes back cancels a stream gone silent.
	idle := time.AfterFunc(watchIdle, cancel)
	defer idle.Stop()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), watchMaxLine)
	var id, typ, data string
	for sc.Scan() {
		idle.Reset(watchIdle)
		line := sc.Text()
		switch {
		case line == "":
			if typ != "" || data != "" {
				w.dispatch(id, typ, data)
			}
			id, typ, data = "", "", ""
		case strings.HasPrefix(line, ":"): // keepalive comment
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				id = value
			case "event":
				typ = value
			case "data":
				data = value
			}
		}
	}
	if err := sc.Err(); err != nil {
		if ctx.Err() != nil && !errors.Is(context.Cause(ctx), context.Canceled) {
			return true, err
		}
		return true, fmt.Errorf("event stream from %s broke: %v", ops.addr, err)
	}
	return true, fmt.Errorf("event stream from %s ended", ops.addr)
}

// dispatch prints one event of the stream.
func (w *watcher) dispatch(id, typ, data string) {
	if n, err := strconv.ParseUint(id, 10, 64); err == nil {
		w.last, w.seen = n, true
	}
	switch typ {
	case "resync":
		var st struct {
			Reason string            `json:"reason"`
			Locks  []json.RawMessage `json:"locks"`
		}
		json.Unmarshal([]byte(data), &st)
		fmt.Fprintf(w.s.stderr, "baton watch: events were missed (%s); %d locks are held or waited for now: see 'baton locks'\n",
			st.Reason, len(st.Locks))
		return
	case "overflow":
		fmt.Fprintln(w.s.stderr, "baton watch: this terminal fell behind the server; resuming")
		return
	case "snapshot", "":
		return
	}
	if w.json {
		fmt.Fprintln(w.s.stdout, data)
		return
	}
	var e opsEvent
	if err := json.Unmarshal([]byte(data), &e); err != nil {
		fmt.Fprintf(w.s.stderr, "baton watch: bad event %q: %v\n", truncateRunes(data, 200), err)
		return
	}
	fmt.Fprintln(w.s.stdout, formatEvent(e))
}

// formatEvent is one readable line: time, type, lock, owner, session, and
// the token of a holder.
func formatEvent(e opsEvent) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %-14s %s  owner=%s session=%s",
		e.At.Local().Format("2006-01-02 15:04:05.000"), e.Type, shellQuote(e.Lock), shellQuote(e.Session.Owner), e.Session.ID)
	if e.Session.Token != nil {
		fmt.Fprintf(&b, " token=%d", *e.Session.Token)
	}
	switch {
	case e.Type == "granted" && e.Session.SinceMS > 0:
		fmt.Fprintf(&b, " waited=%v", time.Duration(e.Session.SinceMS)*time.Millisecond)
	case e.Type != "granted" && e.Type != "queued" && e.Session.Token != nil:
		fmt.Fprintf(&b, " held=%v", time.Duration(e.Session.SinceMS)*time.Millisecond)
	}
	fmt.Fprintf(&b, " remote=%s", e.Session.Remote)
	return b.String()
}
