// Package watch follows the ops API's event stream for baton watch: a
// snapshot first, a dropped stream resumed where it stopped
// (Last-Event-ID), a silent one given up after the keepalives stop, the
// reconnections spaced out, and each event written as a line (or as its
// JSON).
package watch

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/human"
	"github.com/batonlock/baton/internal/opsclient"
	"github.com/batonlock/baton/internal/opsview"
)

const (
	// maxBackoff caps the wait between reconnections.
	maxBackoff = 5 * time.Second
	// maxLine caps one line of the event stream.
	maxLine = 1 << 20
)

// Output is where the events go: Stdout their lines (or, with JSON, each
// EVENT as sent), Stderr what a person watching should know (the
// snapshot's summary, missed events, reconnections).
type Output struct {
	Stdout, Stderr io.Writer
	JSON           bool
}

// Follow follows the events of lock (every lock if "") from ops until ctx
// is done (nil) or the API answers with an error that retrying would not
// mend (a 401, a 404...), which it returns.
func Follow(ctx context.Context, ops *opsclient.Client, lock string, out Output) error {
	// The first connection asks for a snapshot, to say on stderr what is
	// held when the watch starts; a reconnection resumes (Last-Event-ID).
	path := "/v1/events?snapshot=1"
	if lock != "" {
		path += "&lock=" + url.QueryEscape(lock)
	}
	// The stream has no end, so no overall timeout (Stream); a dead
	// connection is noticed by the server's keepalives stopping (see
	// idleBound).
	w := &watcher{out: out}
	var backoff time.Duration
	for {
		connected, err := w.stream(ctx, ops, path)
		if ctx.Err() != nil {
			return nil
		}
		var ae *opsclient.APIError
		if errors.As(err, &ae) && !opsclient.Transient(ae.Status) {
			return err // 401, 404...: retrying will not help
		}
		// A stream that lasted is a server that works: start the backoff
		// again. One that ended at once (a server that is stopping and
		// still answers) keeps growing it.
		if connected && !w.stopping && time.Since(w.since) >= steady {
			backoff = 0
		}
		floor := 100 * time.Millisecond
		if w.stopping {
			floor = time.Second
			err = fmt.Errorf("the server at %s is shutting down", ops.Addr())
		}
		backoff = min(max(2*backoff, floor), maxBackoff)
		fmt.Fprintf(out.Stderr, "baton watch: %s; reconnecting in %v\n", human.OneLine(err.Error()), backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
}

// idleBound is how long a stream may stay silent: the server sends a
// keepalive every 15 s.
const idleBound = 45 * time.Second

type watcher struct {
	out  Output
	last string // the id of the last event seen ("" before the first)
	// since is when the current stream was answered; stopping says that
	// its server sent the shutdown event.
	since    time.Time
	stopping bool
}

// steady is how long a stream must last for a reconnection to start
// with the shortest wait again.
const steady = 2 * time.Second

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
	idle := time.AfterFunc(idleBound, cancel)
	defer idle.Stop()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	var id, typ, data string
	for sc.Scan() {
		idle.Reset(idleBound)
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
		fmt.Fprintf(w.out.Stderr, "baton watch: events were missed (%s); %d locks are held or waited for now%s: see 'baton locks'\n",
			st.Reason, len(st.Locks), also)
		return
	case "shutdown":
		w.stopping = true
		return
	case "overflow":
		fmt.Fprintln(w.out.Stderr, "baton watch: this terminal fell behind the server; resuming")
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
		fmt.Fprintf(w.out.Stderr, "baton watch: now %s held or waited for, %s waiting ('baton locks' lists them); following changes, Ctrl-C to stop\n",
			plural(len(st.Locks), "lock", "locks"), plural(waiting, "session", "sessions"))
		return
	case "":
		return
	}
	if w.out.JSON {
		fmt.Fprintln(w.out.Stdout, data)
		return
	}
	var e opsclient.Event
	if err := json.Unmarshal([]byte(data), &e); err != nil {
		fmt.Fprintf(w.out.Stderr, "baton watch: bad event %q: %v\n", opsclient.TruncateRunes(data, 200), err)
		return
	}
	fmt.Fprintln(w.out.Stdout, opsview.Event(e))
}
