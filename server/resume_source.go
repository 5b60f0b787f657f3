package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// What protocol version 3 needs of what the server runs on: where the
// credentials come from and where the ends of claims are recorded (a
// standalone server's data directory, resume_store.go; a cluster's
// replicated state), and what a term carries in from the one before.

// ResumeSource is where the credentials of version 3 come from and where
// the ends of claims are recorded: a standalone server's data directory
// (StoreResume), or a cluster's replicated state.
type ResumeSource interface {
	// Credentials returns the minter of the resume key, the cluster's id
	// ("" for a standalone server) and the current generation; ok is false
	// while no credential may be given or checked (no key yet, a voter
	// that does not speak version 3).
	Credentials() (m *wire.Minter, clusterID string, generation uint32, ok bool)
	// NewGeneration starts the next generation, durably, and returns it:
	// no credential of it is given before it returns.
	NewGeneration() (uint32, error)
	// GenerationPeriod is how long the server serves one generation at
	// least before it starts the next: R = max(B, 30 s).
	GenerationPeriod() time.Duration
	// Record makes records of ends durable, before the claims leave the
	// table: an operator's release or kick, a conflict lost.
	Record(recs []EndRecord) error
	// Ended looks for a record of the end of the claim of name that is a
	// holder (held, id its token) or a waiter (id its ticket), and returns
	// its kind and the epoch that recorded it.
	Ended(name string, held bool, id uint64) (kind RecordKind, epoch uint64, ok bool)
	// TermServed is told once per term that the term has served its
	// grace whole: no claim of an earlier term can come back any more
	// (the grace is over and no claim of a handover's list is pending).
	// Records and a list older than the term may then be dropped. It is
	// called in a goroutine of its own.
	TermServed(epoch uint64)
}

// RecordKind is how a recorded claim ended.
type RecordKind uint8

// Kinds of records.
const (
	// RecordReleased: an operator released the holder.
	RecordReleased RecordKind = iota + 1
	// RecordKicked: an operator kicked the waiter.
	RecordKicked
	// RecordSuperseded: the claim lost a conflict after a crash.
	RecordSuperseded
	// RecordNameReleased: an operator released a name in a crash grace:
	// no claim of it of an earlier term (below EndRecord.Below) may come
	// back.
	RecordNameReleased
)

func (k RecordKind) String() string {
	switch k {
	case RecordReleased:
		return "released"
	case RecordKicked:
		return "kicked"
	case RecordSuperseded:
		return "superseded"
	case RecordNameReleased:
		return "name_released"
	}
	return fmt.Sprintf("record(%d)", uint8(k))
}

// EndRecord is the record of a claim's end.
type EndRecord struct {
	Kind RecordKind
	Name string
	// Held and ID name the claim: a holder by its token, a waiter by its
	// ticket. Below, for RecordNameReleased, refuses every claim of Name
	// whose token or ticket is below it.
	Held  bool
	ID    uint64
	Below uint64
	// Epoch is the term that made the record: it is kept until a later
	// term has served its grace whole.
	Epoch uint64
}

// Matches reports whether r records the end of the claim of name, a holder
// (held) or a waiter, with id.
func (r *EndRecord) Matches(name string, held bool, id uint64) bool {
	if r.Name != name {
		return false
	}
	if r.Kind == RecordNameReleased {
		return id < r.Below
	}
	return r.Held == held && r.ID == id
}

// Carried is what a term starts with besides an empty lock table.
type Carried struct {
	// Epoch is the term's epoch, the high bits of its tokens and tickets.
	Epoch uint64
	// ResumeBelow lets claims of earlier terms come back during the grace:
	// a token or ticket below it (a crash start: Epoch<<40). 0 admits
	// none.
	ResumeBelow uint64
	// List is a planned handover's list: its claims are pending, and a
	// claim of its term that it does not hold is refused.
	List *HandoverList
	// HoldResumes is how long after the start no resume is answered (a
	// cluster's crash successor's initial wait: the old leader, even if
	// only cut off, has stopped serving by then). Resumes are held, not
	// refused.
	HoldResumes time.Duration
}

// ErrHandingOver refuses an operator's action on a lock while a planned
// handover is under way: the claims were listed as they were, and the
// action would not reach the successor.
var ErrHandingOver = errors.New("a planned handover is under way: the lock's claims are passing to the next server; retry there")

// ErrNotRecorded refuses an operator's action whose record could not be
// made durable: the claim stays frozen (confirmed no more) until its lease
// runs out or the action is retried.
var ErrNotRecorded = errors.New("the end could not be recorded")
