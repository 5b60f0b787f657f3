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
package idlepoll
