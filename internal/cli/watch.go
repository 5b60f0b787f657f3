package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/human"
	"github.com/batonlock/baton/internal/opsclient"
	"github.com/batonlock/baton/internal/opsview"
)

const (
	// watchMaxBackoff caps the wait between reconnections of baton watch.
	watchMaxBackoff = 5 * time.Second
	// watchMaxLine caps one line of the event stream.
	watchMaxLine = 1 << 20
)

func watchCommand() *command {
	return &command{
		name:    "watch",
		summary: "print lock events as they happen",
		usage:   "baton watch [flags] [NAME]",
		flags:   func() *flag.FlagSet { return newAdminFlags("watch", new(adminOptions)) },
		help: `Follows the server's event stream (GET /v1/events) until interrupted: one
line per event - time, type (queued, granted, released, expired,
force_released, kicked, left; resumed and superseded for claims of
protocol version 3, a resumed line with the epoch its token or ticket
came from and the session it replaces), lock, owner, session, and the fencing token
of a holder. With NAME, only that lock's events. -json prints each EVENT as
one line of JSON, for scripts.

A dropped stream is resumed where it stopped (Last-Event-ID), so no event is
lost or repeated. If the server no longer holds the missed events (or it
restarted), a line on stderr says so: re-read 'baton locks'. A cluster
electing a leader (503) is waited for the same way.

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
	// The first connection asks for a snapshot, to say on stderr what is
	// held when the watch starts; a reconnection resumes (Last-Event-ID).
	path := "/v1/events?snapshot=1"
	if name != "" {
		path += "&lock=" + url.QueryEscape(name)
	}
	// The stream has no end, so no overall timeout (Stream); a dead
	// connection is noticed by the server's keepalives stopping (see
	// watchIdle).
	w := &watcher{s: s, json: o.json}
	var backoff time.Duration
	for {
		connected, err := w.stream(ctx, ops, path)
		if ctx.Err() != nil {
			return exitOK
		}
		var ae *opsclient.APIError
		if errors.As(err, &ae) && !opsclient.Transient(ae.Status) {
			return adminFailed(s, c.name, err) // 401, 404...: retrying will not help
		}
		// A stream that lasted is a server that works: start the backoff
		// again. One that ended at once (a server that is stopping and
		// still answers) keeps growing it.
		if connected && !w.stopping && time.Since(w.since) >= watchSteady {
			backoff = 0
		}
		floor := 100 * time.Millisecond
		if w.stopping {
			floor = time.Second
			err = fmt.Errorf("the server at %s is shutting down", ops.Addr())
		}
		backoff = min(max(2*backoff, floor), watchMaxBackoff)
		fmt.Fprintf(s.stderr, "baton watch: %s; reconnecting in %v\n", human.OneLine(err.Error()), backoff)
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
	last string // the id of the last event seen ("" before the first)
	// since is when the current stream was answered; stopping says that
	// its server sent the shutdown event.
	since    time.Time
	stopping bool
}

// watchSteady is how long a stream must last for a reconnection to start
// with the shortest wait again.
const watchSteady = 2 * time.Second

// stream follows one connection until it ends; connected reports whether
// the server accepted it.
func (w *watcher) stream(ctx context.Context, ops *opsclient.Client, path string) (connected bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	header := http.Header{"Accept": {"text/event-stream"}}
	if w.last != "" {
		header.Set("Last-Event-ID", w.last)
	}
	body, err := ops.Stream(ctx, path, header)
	if err != nil {
		return false, err
	}
	defer body.Close()
	w.since, w.stopping = time.Now(), false
	// A timer that every line pushes back cancels a stream gone silent.
	idle := time.AfterFunc(watchIdle, cancel)
	defer idle.Stop()
	sc := bufio.NewScanner(body)
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
		return true, fmt.Errorf("event stream from %s broke: %v", ops.Addr(), err)
	}
	return true, fmt.Errorf("event stream from %s ended", ops.Addr())
}

// dispatch prints one event of the stream.
func (w *watcher) dispatch(id, typ, data string) {
	if id != "" {
		w.last = id // opaque: the server's run and sequence number
	}
	switch typ {
	case "resync":
		var st struct {
			Reason string           `json:"reason"`
			Locks  []opsclient.Lock `json:"locks"`
		}
		json.Unmarshal([]byte(data), &st)
		// After a change of leader the claims that came back were resumed
		// before this stream began: say how many, since their resumed
		// events are not in it.
		resumed := 0
		for _, l := range st.Locks {
			for _, s := range append(l.AllHolders(), l.Waiters...) {
				if s.ResumedFromEpoch > 0 {
					resumed++
				}
			}
		}
		also := ""
		if resumed > 0 {
			also = fmt.Sprintf(", %d claims among them resumed", resumed)
		}
		fmt.Fprintf(w.s.stderr, "baton watch: events were missed (%s); %d locks are held or waited for now%s: see 'baton locks'\n",
			st.Reason, len(st.Locks), also)
		return
	case "shutdown":
		w.stopping = true
		return
	case "overflow":
		fmt.Fprintln(w.s.stderr, "baton watch: this terminal fell behind the server; resuming")
		return
	case "snapshot":
		var st struct {
			Locks []struct {
				Holder  *json.RawMessage  `json:"holder"`
				Waiters []json.RawMessage `json:"waiters"`
			} `json:"locks"`
		}
		json.Unmarshal([]byte(data), &st)
		waiting := 0
		for _, l := range st.Locks {
			waiting += len(l.Waiters)
		}
		plural := func(n int, one, many string) string {
			if n == 1 {
				return "1 " + one
			}
			return fmt.Sprintf("%d %s", n, many)
		}
		fmt.Fprintf(w.s.stderr, "baton watch: now %s held or waited for, %s waiting ('baton locks' lists them); following changes, Ctrl-C to stop\n",
			plural(len(st.Locks), "lock", "locks"), plural(waiting, "session", "sessions"))
		return
	case "":
		return
	}
	if w.json {
		fmt.Fprintln(w.s.stdout, data)
		return
	}
	var e opsclient.Event
	if err := json.Unmarshal([]byte(data), &e); err != nil {
		fmt.Fprintf(w.s.stderr, "baton watch: bad event %q: %v\n", opsclient.TruncateRunes(data, 200), err)
		return
	}
	fmt.Fprintln(w.s.stdout, opsview.Event(e))
}
