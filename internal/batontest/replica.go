package batontest

import (
	"time"

	"github.com/batonlock/baton/server"
)

// LeaseFunc is a server.LeaseNoter of one function, for a test's
// Config.Leases.
type LeaseFunc func(lease time.Duration) error

// NoteLease calls f.
func (f LeaseFunc) NoteLease(lease time.Duration) error { return f(lease) }

// Replica is a server.Replica of functions, for a test's Config.Replica: a
// server that plays one node of a cluster without Raft. A nil function
// answers as a node that nothing holds back: NoteLease records nothing,
// TryNoteLease notes with Note and is done, MayServe is true, TermLost does
// nothing, AboutToServe is false and LeaderHint "".
type Replica struct {
	Note    func(lease time.Duration) error
	TryNote func(lease time.Duration) (bool, error)
	May     func(now time.Time) bool
	Lost    func()
	About   func() bool
	Hint    func() string
}

var _ server.Replica = (*Replica)(nil)

// NoteLease calls Note.
func (r *Replica) NoteLease(lease time.Duration) error {
	if r.Note == nil {
		return nil
	}
	return r.Note(lease)
}

// TryNoteLease calls TryNote, else NoteLease.
func (r *Replica) TryNoteLease(lease time.Duration) (bool, error) {
	if r.TryNote == nil {
		return true, r.NoteLease(lease)
	}
	return r.TryNote(lease)
}

// MayServe calls May.
func (r *Replica) MayServe(now time.Time) bool { return r.May == nil || r.May(now) }

// TermLost calls Lost.
func (r *Replica) TermLost() {
	if r.Lost != nil {
		r.Lost()
	}
}

// AboutToServe calls About.
func (r *Replica) AboutToServe() bool { return r.About != nil && r.About() }

// LeaderHint calls Hint.
func (r *Replica) LeaderHint() string {
	if r.Hint == nil {
		return ""
	}
	return r.Hint()
}
