package ops

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/batonlock/baton/server"
)

// The JSON shapes of docs/operations.md, field for field and in its order.
type (
	sessionJSON struct {
		ID      string  `json:"id"`
		Remote  string  `json:"remote"`
		Owner   string  `json:"owner"`
		LeaseMS int64   `json:"lease_ms"`
		Shared  bool    `json:"shared"`          // protocol v2: a shared claim
		Token   *uint64 `json:"token,omitempty"` // holder only
		// TokenStr is Token in decimal: exact in every JSON parser, where
		// Token is exact only in those that keep 64-bit integers (a
		// JavaScript or jq reader rounds it past 2^53).
		TokenStr string `json:"token_str,omitempty"`
		SinceMS  int64  `json:"since_ms"`
		SilentMS int64  `json:"silent_ms"`
	}
	lockJSON struct {
		Name    string        `json:"name"`
		Holder  *sessionJSON  `json:"holder"`  // the first holder; null if nobody holds it
		Waiters []sessionJSON `json:"waiters"` // never null
		Holders []sessionJSON `json:"holders"` // every holder, in grant order; never null
		Limit   *int          `json:"limit"`   // the limit in force for shared claims; null when none
		// GraceRemainingMs is how long the server still grants nothing
		// (a crash grace, or a new leader's failover grace): why a lock
		// has waiters and no holder. Absent outside a grace.
		GraceRemainingMs int64 `json:"grace_remaining_ms,omitempty"`
	}
	// releasedJSON answers the release of a lock with several holders.
	releasedJSON struct {
		Released []sessionJSON `json:"released"` // in grant order
	}
	locksJSON struct {
		Locks []lockJSON `json:"locks"` // never null
		// GraceRemainingMs: as in lockJSON; absent outside a grace.
		GraceRemainingMs int64 `json:"grace_remaining_ms,omitempty"`
	}
	errorJSON struct {
		Error string `json:"error"`
	}
)

// toLock decides holder or waiter by position in the view, not by
// SessionView.Held, so a holder always shows its token and a waiter never.
func toLock(v server.LockView) lockJSON {
	l := lockJSON{Name: v.Name, Waiters: make([]sessionJSON, 0, len(v.Waiters)), Holders: make([]sessionJSON, 0, len(v.Holders))}
	for _, h := range v.Holders {
		l.Holders = append(l.Holders, toSession(h, true))
	}
	switch {
	case len(l.Holders) > 0:
		l.Holder = &l.Holders[0]
	case v.Holder != nil: // a view that names only its first holder
		s := toSession(*v.Holder, true)
		l.Holder = &s
		l.Holders = append(l.Holders, s)
	}
	if v.Limit > 0 {
		limit := v.Limit
		l.Limit = &limit
	}
	for _, w := range v.Waiters {
		l.Waiters = append(l.Waiters, toSession(w, false))
	}
	return l
}

func toSession(v server.SessionView, holder bool) sessionJSON {
	s := sessionJSON{
		ID:       v.ID,
		Remote:   v.Remote,
		Owner:    v.Owner,
		LeaseMS:  ms(v.Lease),
		Shared:   v.Shared,
		SinceMS:  ms(v.Since),
		SilentMS: ms(v.Silent),
	}
	if holder {
		tok := v.Token
		s.Token = &tok
		s.TokenStr = strconv.FormatUint(tok, 10)
	}
	return s
}

// ms gives d in whole milliseconds, rounded down.
func ms(d time.Duration) int64 { return d.Milliseconds() }

// writeJSON encodes v before writing the header, so an encoding failure
// still gets a proper 500.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // names are shown to people, not embedded in HTML
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":"encoding the answer failed"}` + "\n")
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorJSON{Error: msg})
}

func writeText(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	io.WriteString(w, body)
}
