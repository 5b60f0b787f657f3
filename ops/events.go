package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonlock/baton/server"
)

// EventSource is what /v1/events needs of the lock server (*server.Server
// implements it).
type EventSource interface {
	Subscribe(server.SubscribeRequest) server.SubscribeResult
}

var _ EventSource = (*server.Server)(nil)

const (
	// eventKeepalive is how often an idle stream gets a comment line, so
	// that proxies and clients see it alive.
	eventKeepalive = 15 * time.Second
	// eventSendBuffer is the kernel send buffer (SO_SNDBUF) of an event
	// stream's connection, in bytes (Linux doubles it). Autotuned, it grows
	// to megabytes: a subscriber that stops reading would hold that much of
	// the server's memory, and its writes would not block, so nothing would
	// ever notice it. Bounded, a stuck stream's write blocks after a few
	// batches, and the write timeout cuts it.
	eventSendBuffer = 16 << 10
	// eventWriteTimeout bounds one write of a stream a follower sends on
	// from the leader (cluster.go).
	eventWriteTimeout = DefaultEventWriteTimeout
	// eventBatch is how many events one write takes at most.
	eventBatch = 256
	// eventBatchWindow is how long a subscriber's events gather before they
	// are written: the dashboard does not need them sooner, and it keeps the
	// cost of many subscribers to a wake-up per window each.
	eventBatchWindow = 10 * time.Millisecond
	// eventRetryMS is the reconnection delay EventSource is told to use.
	eventRetryMS = 1000
)

// The JSON of an EVENT (docs/operations.md) and of the stream's own events.
type (
	eventJSON struct {
		Seq     uint64      `json:"seq"`
		At      string      `json:"at"`
		Type    string      `json:"type"`
		Lock    string      `json:"lock"`
		Session sessionJSON `json:"session"`
		// Replaces, for a resumed event, is the id of the session the
		// claim went on from (a connection it left, a pending claim).
		Replaces string `json:"replaces,omitempty"`
	}
	// stateJSON is the data of a snapshot or resync event: the locks as
	// they were after event Seq, from which the stream goes on.
	stateJSON struct {
		Seq    uint64     `json:"seq"`
		Reason string     `json:"reason,omitempty"` // resync only
		Locks  []lockJSON `json:"locks"`
	}
	// shutdownJSON is the data of the shutdown event, the last of a
	// stream whose server is shutting down.
	shutdownJSON struct {
		Message string `json:"message"`
	}
	// historyJSON is the data of a history event: the latest events before
	// the stream's start, oldest first.
	historyJSON struct {
		Events []eventJSON `json:"events"`
	}
	// overflowJSON is the data of the overflow event that ends the stream
	// of a subscriber that fell behind; it may resume after Seq.
	overflowJSON struct {
		Seq     uint64 `json:"seq"`
		Message string `json:"message"`
	}
)

func toEvent(e server.Event) eventJSON {
	return eventJSON{
		Seq:      e.Seq,
		At:       e.At.UTC().Format(time.RFC3339Nano),
		Type:     e.Type,
		Lock:     e.Lock,
		Session:  toSession(e.Session, e.Session.Held),
		Replaces: e.Replaces,
	}
}

// events serves GET /v1/events: a Server-Sent Events stream.
// stillAuthorized is checked at every keepalive: a stream opened with a
// dashboard login ends within eventKeepalive of its logout or expiry.
func (h *handler) streamEvents(w http.ResponseWriter, r *http.Request, stillAuthorized func() bool) {
	if h.events == nil {
		writeError(w, http.StatusNotImplemented, "this server has no event stream")
		return
	}
	q := r.URL.Query()
	req := server.SubscribeRequest{Lock: q.Get("lock")}
	if q.Has("lock") && req.Lock == "" {
		writeError(w, http.StatusBadRequest, "lock is empty: give ?lock=NAME or leave it out")
		return
	}
	switch v := q.Get("snapshot"); v {
	case "", "0", "false":
	case "1", "true":
		req.Snapshot = true
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("snapshot %q: want 1 or 0", v))
		return
	}
	if v := q.Get("history"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > server.EventHistory {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("history %q: want a count from 0 to %d", v, server.EventHistory))
			return
		}
		req.History = n
	}
	// Last-Event-ID is what EventSource sends on reconnecting; ?since= is
	// the same for tools that cannot set a header.
	otherRun := ""
	for _, from := range []struct{ what, v string }{{"since", q.Get("since")}, {"Last-Event-ID", r.Header.Get("Last-Event-ID")}} {
		if from.v == "" {
			continue
		}
		n, same, err := h.parseEventID(from.v)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s %q is not an event id (RUN-SEQ) or sequence number", from.what, from.v))
			return
		}
		req.Resume, req.After, otherRun = true, n, ""
		if !same {
			// Another process numbered it (a restart, or another node
			// leading now): its numbers say nothing here.
			req.After, otherRun = math.MaxUint64, from.v
		}
	}
	if req.Resume {
		// The client has its state and its history; it wants what it missed.
		req.Snapshot, req.History = false, 0
	}

	caller, who := streamCaller(r, h.prefixes)
	if status, msg := h.streams.enter(caller, who, h.mayAdminSome(r)); status != 0 {
		h.refuse(refusedStreams, "ops: event stream refused", "reason", msg, "client", r.RemoteAddr)
		w.Header().Set("Retry-After", "5")
		writeError(w, status, msg)
		return
	}
	defer h.streams.leave(caller)
	boundSendBuffer(r.Context())

	res := h.events.Subscribe(req)
	defer res.Sub.Close()
	rc := http.NewResponseController(w)
	// The listener's read timeout would end the stream's request context
	// (Go's HTTP server reads in the background); a stream reads nothing.
	rc.SetReadDeadline(time.Time{})
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Accel-Buffering", "no") // proxies: do not hold events back
	w.WriteHeader(http.StatusOK)

	var buf bytes.Buffer
	fmt.Fprintf(&buf, "retry: %d\n\n", eventRetryMS)
	last := res.Seq
	switch {
	case res.Resync:
		reason := fmt.Sprintf("the history no longer holds the events after %d: start again from these locks", req.After)
		if otherRun != "" {
			reason = fmt.Sprintf("event id %q is from another run of the server (it restarted, or another node leads now): start again from these locks", otherRun)
		}
		writeSSE(&buf, "resync", h.eventID(last), stateJSON{Seq: last, Locks: toLocks(res.Locks), Reason: reason})
	case req.Snapshot:
		writeSSE(&buf, "snapshot", h.eventID(last), stateJSON{Seq: last, Locks: toLocks(res.Locks)})
	}
	if len(res.History) > 0 {
		hist := historyJSON{Events: make([]eventJSON, len(res.History))}
		for i, e := range res.History {
			hist.Events[i] = toEvent(e)
		}
		writeSSE(&buf, "history", h.eventID(last), hist)
	}
	if req.Resume && !res.Resync {
		last = req.After
	}
	if !h.sendSSE(rc, w, r, &buf) {
		return
	}

	keepalive := time.NewTicker(eventKeepalive)
	defer keepalive.Stop()
	window := time.NewTimer(0)
	<-window.C
	defer window.Stop()
	batch := make([]server.Event, 0, eventBatch)
	for {
		evs, more, err := res.Sub.Read(batch[:0], eventBatch)
		switch {
		case errors.Is(err, server.ErrFellBehind):
			writeSSE(&buf, "overflow", h.eventID(last), overflowJSON{Seq: last,
				Message: fmt.Sprintf("this client fell more than %d events behind; resume after %d", server.EventHistory, last)})
			h.sendSSE(rc, w, r, &buf)
			h.log.Warn("ops: event subscriber fell behind; stream closed", "client", r.RemoteAddr, "seq", last)
			return
		case err != nil:
			// The server shut down: say so, so that a client backs off
			// and tells its user instead of reconnecting at once to a
			// server that is going away.
			if r.Context().Err() == nil {
				writeSSE(&buf, "shutdown", h.eventID(last), shutdownJSON{Message: "the server is shutting down"})
				h.sendSSE(rc, w, r, &buf)
			}
			return
		}
		if len(evs) > 0 {
			for _, e := range evs {
				h.encoded.write(&buf, e, h.run)
				last = e.Seq
			}
			if !h.sendSSE(rc, w, r, &buf) {
				return
			}
			continue // read on: Read says when there is nothing left
		}
		select {
		case <-more:
			// Let a burst gather for a moment and send it in one write:
			// one wake-up and one syscall per window for each subscriber.
			window.Reset(eventBatchWindow)
			select {
			case <-window.C:
			case <-r.Context().Done():
				return
			}
		case <-keepalive.C:
			if !stillAuthorized() {
				return
			}
			buf.WriteString(": keepalive\n\n")
			if !h.sendSSE(rc, w, r, &buf) {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

// encodedEvents caches the SSE text of recent events, so that many
// subscribers cost one JSON encoding per event, not one each.
type encodedEvents struct {
	mu   sync.Mutex
	ring [512]struct {
		seq  uint64
		text []byte
	}
}

// write appends event e's SSE text, with an id of run, to buf.
func (c *encodedEvents) write(buf *bytes.Buffer, e server.Event, run string) {
	slot := &c.ring[e.Seq%uint64(len(c.ring))]
	c.mu.Lock()
	if slot.seq == e.Seq && slot.text != nil {
		text := slot.text
		c.mu.Unlock()
		buf.Write(text)
		return
	}
	c.mu.Unlock()
	var b bytes.Buffer
	writeSSE(&b, e.Type, run+"-"+strconv.FormatUint(e.Seq, 10), toEvent(e))
	text := b.Bytes()
	c.mu.Lock()
	slot.seq, slot.text = e.Seq, text
	c.mu.Unlock()
	buf.Write(text)
}

// writeSSE appends one event to buf. The JSON has no newline inside, so it
// is one data line.
func writeSSE(buf *bytes.Buffer, typ string, id string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		data = []byte(`{"error":"encoding the event failed"}`)
	}
	fmt.Fprintf(buf, "id: %s\nevent: %s\ndata: %s\n\n", id, typ, data)
}

// eventID is the SSE id of the stream's position after event seq: the
// handler's run, a dash, and seq. Sequence numbers restart with the
// process and differ from node to node; the run tells a Last-Event-ID
// from another process, which must not be taken for a position here.
func (h *handler) eventID(seq uint64) string {
	return h.run + "-" + strconv.FormatUint(seq, 10)
}

// parseEventID reads an id eventID wrote, or a bare sequence number (a
// tool's ?since=N, taken as this run's); same is false for another run's id.
func (h *handler) parseEventID(v string) (seq uint64, same bool, err error) {
	run, num, ok := strings.Cut(v, "-")
	if !ok {
		run, num = h.run, v
	}
	seq, err = strconv.ParseUint(num, 10, 64)
	if err != nil || run == "" {
		return 0, false, fmt.Errorf("bad event id %q", v)
	}
	return seq, run == h.run, nil
}

// sendSSE writes and flushes buf under a write deadline; false if the
// client is gone or too slow (then logged: it stopped reading).
func (h *handler) sendSSE(rc *http.ResponseController, w http.ResponseWriter, r *http.Request, buf *bytes.Buffer) bool {
	defer buf.Reset()
	rc.SetWriteDeadline(time.Now().Add(h.streams.writeTimeout)) // best effort: not every writer has deadlines
	_, err := w.Write(buf.Bytes())
	if err == nil {
		err = rc.Flush()
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		h.log.Warn("ops: event subscriber stopped reading; stream closed", "client", r.RemoteAddr,
			"write_timeout", h.streams.writeTimeout.String())
	}
	return err == nil
}

// streamLimits bounds the event streams: how many are open, how many one
// caller may have open, and how long a write to one may wait. The last
// adminRoom places are kept for callers that may take admin actions, so
// that readers cannot take every stream from the operators. In a cluster
// every stream is served by the leader (a follower passes it on with its
// caller), so the limits are the cluster's.
type streamLimits struct {
	max, perCaller, adminRoom int
	writeTimeout              time.Duration
	mu                        sync.Mutex
	open                      int
	byCaller                  map[string]int
	gauge                     prometheus.Gauge // nil when unpublished
}

func (l *streamLimits) register(reg prometheus.Registerer) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "baton_ops_event_streams", Help: "Open GET /v1/events streams.",
	})
	if reg != nil && reg.Register(g) == nil {
		l.gauge = g
	}
}

// enter takes a place for a stream of caller (who names it for people),
// an admin caller or not. When it may not, it returns the status of the
// refusal (429 for the caller's own limit, 503 when the server's are full)
// and why.
func (l *streamLimits) enter(caller, who string, admin bool) (status int, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.open >= l.max:
		return http.StatusServiceUnavailable, fmt.Sprintf("%d event streams are open, the most this server serves: try later", l.max)
	case !admin && l.open >= l.max-l.adminRoom:
		return http.StatusServiceUnavailable, fmt.Sprintf("%d event streams are open: the last %d of %d are kept for callers with an admin grant; try later",
			l.open, l.adminRoom, l.max)
	case l.byCaller[caller] >= l.perCaller:
		return http.StatusTooManyRequests, fmt.Sprintf("%s has %d event streams open, the most one caller may", who, l.byCaller[caller])
	}
	if l.byCaller == nil {
		l.byCaller = make(map[string]int)
	}
	l.byCaller[caller]++
	l.open++
	if l.gauge != nil {
		l.gauge.Set(float64(l.open))
	}
	return 0, ""
}

func (l *streamLimits) leave(caller string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byCaller[caller]--; l.byCaller[caller] <= 0 {
		delete(l.byCaller, caller)
	}
	l.open--
	if l.gauge != nil {
		l.gauge.Set(float64(l.open))
	}
}

// streamCaller names r's caller for the limit of streams per caller: the
// identities of its verified client certificate, else its address, an
// IPv6 one by its prefix (prefixes; a follower passes its caller's on over
// TLS); and the same for people.
func streamCaller(r *http.Request, prefixes server.SourcePrefixes) (key, who string) {
	if ids := callerIdentities(r); len(ids) > 0 {
		return "id:" + strings.Join(ids, "\x00"), "client identity " + strings.Join(quoteAll(ids), ", ")
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if a, err := netip.ParseAddr(host); err == nil {
		k := prefixes.Key(a)
		if k.IsSingleIP() {
			host = k.Addr().String()
		} else {
			host = k.String()
		}
	}
	return "ip:" + host, "address " + host
}

// connKey is the context key of the connection a request came on.
type connKey struct{}

// ConnSendBuffer bounds the kernel send buffer of every ops connection
// (ConnContext). Left to the system, a peer that pipelines requests and
// never reads the answers (the dashboard's script, 64 times) makes the
// kernel grow the buffer to its maximum, 4 MiB, which the peer keeps
// pinned for as long as it likes, and which outlives the connection as an
// orphan: 256 of them held about 1 GiB of the host's TCP memory. Bounded,
// a connection pins at most twice this (the kernel's bookkeeping).
const ConnSendBuffer = 128 << 10

// ConnContext is the http.Server.ConnContext of the ops listener: it
// bounds each connection's kernel send buffer (ConnSendBuffer), and keeps
// each request's connection at hand, so that an event stream can bound it
// further (eventSendBuffer).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	setSendBuffer(c, ConnSendBuffer)
	return context.WithValue(ctx, connKey{}, c)
}

// boundSendBuffer sets the send buffer of the stream's TCP connection to
// eventSendBuffer, if ConnContext gave its connection (best effort: a
// stream without it keeps the connection's buffer).
func boundSendBuffer(ctx context.Context) {
	c, _ := ctx.Value(connKey{}).(net.Conn)
	setSendBuffer(c, eventSendBuffer)
}

// setSendBuffer sets the send buffer of the TCP connection under c (through
// TLS and LimitListener's wrappers) to n bytes, best effort.
func setSendBuffer(c net.Conn, n int) {
	for c != nil {
		if tcp, ok := c.(*net.TCPConn); ok {
			tcp.SetWriteBuffer(n)
			return
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return
		}
		c = w.NetConn()
	}
}

func toLocks(views []server.LockView) []lockJSON {
	out := make([]lockJSON, 0, len(views))
	for _, v := range views {
		out = append(out, toLock(v))
	}
	return out
}
