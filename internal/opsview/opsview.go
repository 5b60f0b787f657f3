// Package opsview writes the ops API's answers for people: baton locks'
// tables, baton cluster's, baton watch's line for an event, and the
// summary lines of baton release and baton kick. The commands fetch;
// this package only formats, names and owners escaped (internal/human).
package opsview

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/batonlock/baton/internal/human"
	"github.com/batonlock/baton/internal/opsclient"
)

// Grace says why waiters wait with nobody holding: the server's grace (a
// crash grace, or a new leader's failover grace) grants nothing.
func Grace(w io.Writer, ms int64) {
	if ms > 0 {
		fmt.Fprintf(w, "%s (the server grants no lock until then: the holders of before the restart or failover may still be running)\n", human.Grace(ms))
	}
}

// Locks writes the table of baton locks: a row per holder (a lock that
// only has waiters gets one row without a holder), each with its lock's
// slots and waiters.
func Locks(w io.Writer, locks []opsclient.Lock) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHOLDER\tSESSION\tKIND\tTOKEN\tHELD FOR\tSLOTS\tWAITERS")
	for _, l := range locks {
		holders := l.AllHolders()
		if len(holders) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t%s\t%d\n", human.Escape(l.Name), slots(l), len(l.Waiters))
		}
		for _, h := range holders {
			token := "-"
			if h.Token != nil {
				token = strconv.FormatUint(*h.Token, 10)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", human.Escape(l.Name), owner(h.Owner), h.ID, kind(h),
				token, human.Age(ms(h.SinceMS)), slots(l), len(l.Waiters))
		}
	}
	tw.Flush()
}

// Lock writes one lock, a line on each holder, and its queue.
func Lock(w io.Writer, l opsclient.Lock) {
	Locks(w, []opsclient.Lock{l})
	for _, h := range l.AllHolders() {
		resumed := ""
		if h.ResumedFromEpoch > 0 {
			resumed = fmt.Sprintf(", resumed from epoch %d", h.ResumedFromEpoch)
		}
		fmt.Fprintf(w, "holder: session %s from %s, lease %v, last heard %v ago%s\n",
			h.ID, h.Remote, ms(h.LeaseMS), human.Age(ms(h.SilentMS)), resumed)
	}
	if l.Limit != nil {
		fmt.Fprintf(w, "limit: %d shared claims at once, set by the name's shared sessions\n", *l.Limit)
	}
	if len(l.Waiters) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "POSITION\tSESSION\tOWNER\tKIND\tWAITED\tLEASE\tREMOTE")
	for i, s := range l.Waiters {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%v\t%s\n", i+1, s.ID, owner(s.Owner), kind(s), human.Age(ms(s.SinceMS)), ms(s.LeaseMS), s.Remote)
	}
	tw.Flush()
}

// Released is the summary line of holder sv's force-release of lock
// name; name "" when the lock could not be looked up.
func Released(w io.Writer, name string, sv opsclient.Session) {
	if name == "" {
		fmt.Fprintf(w, "released session %s (owner %s, token %s, held for %s)\n",
			sv.ID, owner(sv.Owner), token(sv), human.Age(ms(sv.SinceMS)))
		return
	}
	fmt.Fprintf(w, "released %s: took it from session %s (owner %s, token %s, held for %s)\n",
		human.Escape(name), sv.ID, owner(sv.Owner), token(sv), human.Age(ms(sv.SinceMS)))
}

// Kicked is the summary line of waiter sv's removal from its queue.
func Kicked(w io.Writer, sv opsclient.Session) {
	fmt.Fprintf(w, "kicked session %s (owner %s, waited %s)\n", sv.ID, owner(sv.Owner), human.Age(ms(sv.SinceMS)))
}

// slots is "in use/limit": the holders against the limit in force for
// shared claims, or against 1 when the name has no shared session (an
// exclusive claim holds it alone, as a semaphore of 1).
func slots(l opsclient.Lock) string {
	limit := 1
	if l.Limit != nil {
		limit = *l.Limit
	}
	return fmt.Sprintf("%d/%d", len(l.AllHolders()), limit)
}

// kind names a session's claim.
func kind(s opsclient.Session) string {
	if s.Shared {
		return "shared"
	}
	return "exclusive"
}

func owner(o string) string {
	if o == "" {
		return "-"
	}
	return human.Escape(o)
}

// token is a holder's token, or "?" if the answer has none.
func token(sv opsclient.Session) string {
	if sv.Token == nil {
		return "?"
	}
	return strconv.FormatUint(*sv.Token, 10)
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// Event is baton watch's readable line of e: time, type, lock, owner,
// session, and the token of a holder.
func Event(e opsclient.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %-14s %s  owner=%s session=%s",
		e.At.Local().Format("2006-01-02 15:04:05.000"), e.Type, human.ShellQuote(e.Lock), human.ShellQuote(e.Session.Owner), e.Session.ID)
	if e.Session.Token != nil {
		fmt.Fprintf(&b, " token=%d", *e.Session.Token)
	}
	switch {
	case e.Type == "granted" && e.Session.SinceMS > 0:
		fmt.Fprintf(&b, " waited=%v", ms(e.Session.SinceMS))
	case e.Type != "granted" && e.Type != "queued" && e.Session.Token != nil:
		fmt.Fprintf(&b, " held=%v", ms(e.Session.SinceMS))
	}
	if e.Type == "resumed" {
		fmt.Fprintf(&b, " from_epoch=%d", e.Session.ResumedFromEpoch)
		if e.Replaces != "" {
			fmt.Fprintf(&b, " replaces=%s", e.Replaces)
		}
	}
	fmt.Fprintf(&b, " remote=%s", e.Session.Remote)
	return b.String()
}
