package idlepoll

import (
	"errors"
	"time"
)

// Handler is what the poller needs of the sessions it serves, which are
// of type T (a pointer, compared to find them; the zero T is none). Its
// methods are called on a shard's goroutine (Serve, Abandon), on a
// shard's due timer (Overdue), or with a shard's mutex held (MayPark,
// SetDue, Due; PollConn too, and from any method of the Poller): none of
// them may call the Poller back but Serve, which may call Repark, Forget
// and Release, and v's Conn.ShardBuf, for the session it serves, and
// Abandon, which must Release the session it gets.
type Handler[T comparable] interface {
	// PollConn is v's Conn, the same every call.
	PollConn(v T) *Conn[T]
	// MayPark reports whether v may (still) park: false once its end has
	// begun (see Poller.Park and Poller.Unpark).
	MayPark(v T) bool
	// SetDue records when the first frame of v, being adopted
	// (Poller.Adopt), must be whole; Due reads it back.
	SetDue(v T, due time.Time)
	Due(v T) time.Time
	// Serve handles what woke parked v, which the shard has taken out of
	// the parked set (see the package's doc): ended says that the event
	// came with the client's close or reset (or a socket error). Serve
	// must leave v parked again (Repark), closed (Forget), or released to
	// a goroutine of its own (Release); or report readAgain: then v stays
	// the shard's, out of its epoll set, and Serve is called for it again
	// in the shard's next turn of such sessions (Config.MorePace).
	Serve(v T, ended bool) (readAgain bool)
	// Overdue gets the adopted sessions whose first frame has not come by
	// their due time, unparked and released: each needs its reader.
	Overdue(late []T)
	// Abandon gets a session that its shard stops with (Stop) while it
	// was reading it at its pace (readAgain): it is still on the poller's
	// books (Release it) and needs its reader.
	Abandon(v T)
}

// Config is what New needs.
type Config struct {
	// Shards is how many epoll instances there are, each with its
	// goroutine; at least one.
	Shards int
	// BufSize is each shard's read buffer (Conn.ShardBuf).
	BufSize int
	// Parked counts the sessions the poller holds: parked, or being
	// served by a shard.
	Parked Gauge
	// MoreTurn is how many of the sessions Serve said readAgain of a
	// shard reads in a turn, and MorePace how often it takes such a turn.
	MoreTurn int
	MorePace time.Duration
}

// Gauge is a number that goes up and down (a Prometheus gauge).
type Gauge interface {
	Inc()
	Dec()
}

// ErrWouldBlock says that a connection has nothing to read now.
var ErrWouldBlock = errors.New("nothing to read")
