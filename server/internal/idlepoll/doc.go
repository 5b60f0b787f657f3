// Package idlepoll serves idle connections without a goroutine each: a
// parked session has no reader goroutine, and a shard (an epoll instance
// with a goroutine of its own, one per CPU) calls its Handler when its
// connection becomes readable, on the shard's goroutine, so that the
// handler answers it without waiting and parks it again, or hands it to a
// goroutine of its own. It knows nothing of what the connections carry.
//
// A registered descriptor is edge-triggered and stays armed while its
// session is parked or being served by its shard; it is removed when the
// session is released to a goroutine, and added again when that
// goroutine parks it. So serving a parked session costs its read and
// write, and no epoll_ctl and no goroutine start. Each shard's goroutine
// waits for its epoll descriptor through Go's runtime poller (an epoll
// descriptor is itself pollable), not in a blocking epoll_wait: a wake-up
// costs what any goroutine's read costs, with no thread of its own to
// wake and no P to win back.
//
// A session the Handler says may have more to read (readAgain: a
// pipelining client) leaves its shard's epoll set and is read again once
// a turn (Config.MoreTurn of them every Config.MorePace), so that a flood
// on one connection delays the others' answers by at most a turn.
// Adopted sessions (Adopt), parked before their first frame, are on a due
// list; those still waiting at their due time go to Handler.Overdue.
//
// # Who owns a session
//
// A session has one owner at a time: the only goroutine that may read its
// connection, touch its reader's state (what the handler keeps between
// reads; in the server: extra, started, waited, readErr, hdr) and close
// its connection. The first frame's due time (firstDue in the server) is
// set by Adopt under the shard's mutex, and read under it by the due
// timer, later by the owner. The poller's books in its Conn (registered,
// parked, inDue and the due links) are changed under its shard's mutex;
// the shard that serves a session (Serve, and its turn of sessions read
// again) reads its registered flag without the mutex, since nothing else
// changes it then. The rest of the Conn (descriptor, shard,
// callbacks) is set by Bind before anyone else has the session, and only
// read after it. TryRead is the owner's; TryWrite is the writer's (the
// handler serializes writes). The parked gauge (Config.Parked) counts the
// sessions parked or answered in a shard.
//
//	state          owner, and what it may touch      how it moves on
//	-------------  --------------------------------  ---------------------------------
//	accepted       the accepting goroutine: all of   Adopt: parked, on its shard's due
//	               it. The server may already end    list (its due time set before,
//	               it (MayPark turns false), which   while nobody else has it). Not
//	               touches no reader's state         bound, or Adopt false: it starts
//	                                                 the reader goroutine
//	parked         nobody: no goroutine reads it.    its shard's wake-up takes it out
//	               In its shard's parked set (by     of the parked set under the
//	               descriptor), registered (edge-    mutex: answered in a shard.
//	               triggered); parked is true        Unpark (its end has begun): the
//	                                                 caller starts its reader. Its due
//	                                                 time passes before its first
//	                                                 frame: unparked and deregistered,
//	                                                 Overdue starts its reader
//	answered in    the shard's goroutine, in         Serve ends with Repark: parked
//	a shard        Handler.Serve: reads (TryRead,    (registered again if it was not;
//	               ShardBuf), the reader's state.    off the due list once its first
//	               Still registered, so no wake-up   frame came); Forget, and it
//	               is lost (another event finds it   closes the connection: closed;
//	               not parked and is dropped);       Release: a reader goroutine.
//	               deregistered while in the         readAgain: stays, Serve again in
//	               shard's more line (readAgain).    the shard's next turn. Stop with
//	               Unpark finds it not parked        it in the more line: Abandon
//	reader         a goroutine of its own (the       Park, once idle (MayPark asked
//	goroutine      handler's, started at accept,     under the shard's mutex): parked.
//	               by Release, Overdue or Unpark's   Its end: closing, then closed by
//	               caller): blocking reads, or       this goroutine
//	               TryRead. Off the poller's books
//	writing        (beside any state above) the      The write's end: its output is
//	               goroutine that took the write     gone, or left for a blocking
//	               turn (the server: flushing, under flush (the owner's, or a
//	               wmu): a push to a parked waiter   flusher's). A failed write ends
//	               comes from the releaser's         the session first (a parked one
//	               goroutine. TryWrite's scratch is  is unparked), then closes the
//	               its; Control keeps the            connection
//	               descriptor open under it
//	closing        as before its end: the end sets   parked: Unpark, a reader goroutine
//	               MayPark false before it asks      delivers the end. In a shard:
//	               Unpark, and Park, Adopt and       Repark refuses it and Serve
//	               Repark ask MayPark under the      releases it to a reader. A reader
//	               shard's mutex: a session never    goroutine delivers it and closes
//	               parks once its end has begun
//	closed         nobody. Off the poller's books:   -
//	               not parked, not in the due list;
//	               its close took its descriptor out
//	               of the epoll set. Closed by its
//	               owner, or by a failed write after
//	               its end
//
// So a descriptor in a shard's parked set always belongs to a connection
// that is not closed (a session whose end has begun is taken out, by
// Unpark, before its owner closes it): its number cannot be another
// connection's. A removal from the epoll set
// runs under the descriptor's reference (the RawConn's Control), so that
// it never silences another connection that reuses a closed one's number.
package idlepoll
