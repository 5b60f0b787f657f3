package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/human"
	"github.com/batonlock/baton/internal/opsclient"
	"golang.org/x/term"
)

// Timing of the status of baton run while it waits.
const (
	// statusDelay passes before the status first shows, so that a lock
	// granted at once shows nothing.
	statusDelay = 300 * time.Millisecond
	// statusTick refreshes the time waited on a terminal.
	statusTick = time.Second
	// pollEvery is how often the ops API is asked who holds the lock.
	pollEvery = time.Second
	// defaultWidth is assumed when the terminal does not tell its width.
	defaultWidth = 80
)

// lockInfo is what the ops API tells about the lock waited for.
type lockInfo struct {
	known   bool   // the API answered
	held    bool   // the lock has a holder
	holder  string // the first holder's owner text
	holders int    // how many hold it
	limit   int    // the limit in force for shared claims; 0 if none
	// graceUntil is when the server's grace ends (zero outside one): it
	// grants nothing before, whoever waits.
	graceUntil time.Time
	err        string // why the API could not be asked, if it could not
}

// waitState is what the status shows.
type waitState struct {
	name     string
	start    time.Time
	waiting  bool // the wait has lasted or the server said WAITING
	position int  // from the server's last WAITING; 0 if none yet
	info     lockInfo
}

// parts are the facts shown, in order; with the time waited if withTime.
// The grace is told by the time left (now), or, with neither now nor the
// time waited, by when it ends: the key of the -v line, which must change
// only when a fact does.
func (w waitState) parts(now time.Time, withTime bool) []string {
	var p []string
	if w.position > 0 {
		p = append(p, fmt.Sprintf("position %d", w.position))
	}
	if withTime {
		p = append(p, human.Age(now.Sub(w.start)))
	}
	if w.info.known && w.info.held {
		holder := w.info.holder
		if holder == "" {
			holder = "(no owner text)"
		}
		switch n := w.info.holders; {
		case n == 2:
			holder += " and 1 other"
		case n > 2:
			holder += fmt.Sprintf(" and %d others", n-1)
		}
		p = append(p, "held by "+holder)
	}
	if w.info.known && w.info.limit > 0 {
		p = append(p, fmt.Sprintf("%d/%d slots", w.info.holders, w.info.limit))
	}
	if g := w.info.graceUntil; !g.IsZero() {
		switch left := g.Sub(now); {
		case now.IsZero():
			p = append(p, "grace until "+g.Round(time.Second).Format(time.RFC3339))
		case left > 0:
			p = append(p, human.Grace(left.Milliseconds()))
		}
	}
	return p
}

// line is the live status: "waiting for jobs/nightly: position 3, 12s,
// held by host:123", or for a semaphore "waiting for pool: position 1,
// 12s, held by host:123 and 2 others, 3/3 slots".
func (w waitState) line(now time.Time) string {
	return "waiting for " + w.name + ": " + strings.Join(w.parts(now, true), ", ")
}

// change is the key of the -v line of the status, without the time, so
// that a line is logged only when a fact changes.
func (w waitState) change() string {
	return strings.Join(w.parts(time.Time{}, false), ", ")
}

// changeLine is the -v line: the facts at now, without the time waited.
func (w waitState) changeLine(now time.Time) string {
	p := w.parts(now, false)
	if len(p) == 0 {
		return "waiting for " + w.name
	}
	return "waiting for " + w.name + ": " + strings.Join(p, ", ")
}

// statusLine writes baton run's stderr: a live line rewritten in place on
// a terminal, and plain lines. Used by one goroutine only.
type statusLine struct {
	prog    string // the prefix of its lines: "baton run"
	w       io.Writer
	tty     bool
	fd      int
	verbose bool
	shown   bool   // a live line is on the terminal
	logged  string // the key of the last -v waiting line, to log changes only
	// anyLogged: a -v waiting line has been logged.
	anyLogged bool
}

// newStatusLine writes to w; quiet (-q) shows no live line even on a
// terminal.
func newStatusLine(w io.Writer, verbose, quiet bool) *statusLine {
	l := &statusLine{prog: "baton run", w: w, verbose: verbose}
	if f, ok := w.(*os.File); ok && !quiet && term.IsTerminal(int(f.Fd())) {
		l.tty, l.fd = true, int(f.Fd())
	}
	return l
}

// active reports whether a status is shown at all.
func (l *statusLine) active() bool { return l.tty || l.verbose }

// show shows w: in place on a terminal, else as a -v line when it changed.
func (l *statusLine) show(w waitState, now time.Time) {
	switch {
	case !w.waiting:
	case l.tty:
		width, _, err := term.GetSize(l.fd)
		if err != nil || width <= 0 {
			width = defaultWidth
		}
		// One column short of the edge: a line that fills it would wrap on
		// some terminals, and \r would then rewrite only the last row.
		fmt.Fprintf(l.w, "\r%s\x1b[K", opsclient.TruncateRunes(l.prog+": "+w.line(now), width-1))
		l.shown = true
	case l.verbose:
		if c := w.change(); c != l.logged || !l.anyLogged {
			l.logged, l.anyLogged = c, true
			fmt.Fprintf(l.w, "%s: %s\n", l.prog, w.changeLine(now))
		}
	}
}

// clear removes the live line, if one is shown.
func (l *statusLine) clear() {
	if l.shown {
		fmt.Fprint(l.w, "\r\x1b[K")
		l.shown = false
	}
}

// printf prints one line, after removing the live line.
func (l *statusLine) printf(format string, args ...any) {
	l.clear()
	fmt.Fprintf(l.w, format+"\n", args...)
}

// roundWait is a wait as logged: milliseconds are enough.
func roundWait(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// pollLock asks the ops API about lock name every pollEvery, from
// statusDelay on, and sends each answer on out (replacing one not yet
// taken), until ctx ends.
func pollLock(ctx context.Context, ops *opsclient.Client, name string, out chan lockInfo) {
	t := time.NewTimer(statusDelay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		info := queryLock(ctx, ops, name)
		if ctx.Err() != nil {
			return
		}
		select {
		case <-out:
		default:
		}
		out <- info
		t.Reset(pollEvery)
	}
}

// queryLock is one GET /v1/locks/{name}.
func queryLock(ctx context.Context, ops *opsclient.Client, name string) lockInfo {
	body, err := ops.Do(ctx, "GET", "/v1/locks/"+url.PathEscape(name))
	if err != nil {
		if ae, ok := err.(*opsclient.APIError); ok && ae.Status == 404 {
			return lockInfo{known: true} // nobody holds it: the grant is near
		}
		return lockInfo{err: err.Error()}
	}
	var l opsclient.Lock
	if err := json.Unmarshal(body, &l); err != nil {
		return lockInfo{err: fmt.Sprintf("the ops API at %s sent bad JSON: %v", ops.Addr(), err)}
	}
	info := lockInfo{known: true, holders: len(l.AllHolders())}
	if l.Holder != nil {
		info.held, info.holder = true, human.Escape(l.Holder.Owner)
	}
	if l.Limit != nil {
		info.limit = *l.Limit
	}
	if l.GraceRemainingMS > 0 {
		info.graceUntil = time.Now().Add(time.Duration(l.GraceRemainingMS) * time.Millisecond)
	}
	return info
}
