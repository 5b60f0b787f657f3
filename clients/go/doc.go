// Package baton is the Go client of Baton, a named-lock server.
//
//	import baton "github.com/batonlock/baton/clients/go"
//
// The client is a module of its own that requires no other module, so a
// program that imports it gets nothing of the server.
//
// # The model
//
// One client owns a named lock and does the work; the others wait in a FIFO
// queue. Each claim is one TCP connection: closing it is the release (a
// reset by default, WithNormalClose for a FIN), and the server hands the
// lock to the next waiter at once. While the holder
// lives, heartbeats keep the lock for as long as the work takes; the lease
// (WithLease) is not a time limit but a failure detector: after a full lease
// of silence the server declares the holder dead and moves the lock. Every
// grant carries a fencing token, larger than every earlier token of the same
// name, for the guarded resource to check.
//
//	c, err := baton.New([]string{"baton.internal:7000"}, baton.WithLease(10*time.Second))
//	...
//	err = c.Do(ctx, "jobs/nightly", func(ctx context.Context, l *baton.Lock) error {
//		for _, batch := range batches {
//			if err := l.Err(); err != nil { // right before each step: reads the clock
//				return err
//			}
//			if err := store.Write(ctx, batch, l.Token()); err != nil { // the store refuses old tokens
//				return err
//			}
//		}
//		return nil
//	})
//
// Do runs work while the lock is held; Acquire returns a *Lock for callers
// that cannot use a callback, to be released with Release. WithNoWait(true)
// makes either a try-lock that fails with ErrBusy. On top of the lock:
// Campaign for leader election, AcquireAll and DoAll for several names at
// once, and WithMaxHold to bound how long a live holder keeps a lock.
//
// Locks are not re-entrant. Acquire or Do for a name that the same Client
// already holds or waits for would queue behind its own caller, so it fails
// at once with ErrAlreadyHeld; WithQueueBehindSelf(true) lets it queue, to
// hand a lock on between goroutines of one process.
//
// # Semaphores and read/write locks
//
// A claim is exclusive unless an option makes it shared. WithLimit(n) takes
// one slot of a counting semaphore of n: at most n shared claims hold the
// name at once. WithShared(true) takes a reader's claim (limit
// ReaderLimit); the writers of the same name are ordinary exclusive
// claims, so the name is a read/write lock. The queue stays strictly FIFO
// and nobody overtakes: a claim waits while one ahead of it waits, so
// readers that come after a waiting writer wait behind it and a writer is
// never starved. Lock.Shared and Lock.Limit tell a lock's kind.
//
//	err = c.Do(ctx, "render/gpu", func(ctx context.Context, l *baton.Lock) error {
//		return render(ctx, job) // at most 4 renders at once, fleet-wide
//	}, baton.WithLimit(4))
//
// The limit belongs to the name while it has shared sessions: a shared
// claim that gives another limit fails at once with a *LimitMismatchError
// (matching ErrLimitMismatch), which says the limit in force; it is never
// retried. An exclusive claim is sent as protocol version 1, byte for
// byte, as without these options; a shared one as version 2.
//
// Every grant has its own fencing token, larger than every earlier one of
// the name, and two holders never share one. With several holders, the
// highest token no longer names the only holder: a resource that refuses
// every token below the highest it has seen would refuse live holders of
// older grants. A read/write lock's writer holds alone, so its writes are
// fenced as a mutex's are: the resource refuses a write whose token is
// below the highest token of any access it has seen, reads included. A
// semaphore's holders cannot be told from a stale one by their tokens;
// fence per record (each record refuses a token below the highest that
// wrote it), as docs/clients.md explains.
//
// The re-entrancy rule counts slots: a Client may hold several slots of one
// semaphore (from several goroutines, say) as long as it holds fewer than
// the limit; a claim that its own claims alone would keep waiting (a slot
// beyond the limit, any claim beside its own exclusive one, an exclusive
// claim beside its own shared ones) fails with ErrAlreadyHeld. One hazard
// remains, as with sync.RWMutex: a reader that waits for a second reader of
// the same name in its own process can wait forever if a writer queues
// between them.
//
// # Ownership ends, work must stop
//
// A lock can end without Release: an operator force-releases it, the server
// shuts down, the connection breaks, the server stops confirming it, or the
// maximum hold passes. The lock's goroutine then cancels the Lock's context
// (the work's context in Do) with a cause that wraps ErrLockLost; Lock.Err,
// Release and Do return the same error. A held lock is never taken again
// behind the caller's back: whether to try again is the caller's decision
// (IsRetryable helps).
//
// # Pauses: ask the clock before each step
//
// A process can stop without its connection breaking: a long GC, SIGSTOP,
// a suspended VM, a thread or event loop blocked for seconds. Its
// heartbeats stop, the server moves the lock after a lease of silence, and
// the holder learns nothing until it runs again. Then whatever a goroutine
// has to set (the context's Done channel, contexts derived from it) is set
// only once that goroutine runs, which can be after the work's next step.
// Lock.Err does not wait for it: it compares the clock with the lock's
// deadline (0.8 × lease after the send of the last request the server
// answered) and reports the loss at once. So does the Err of the
// context the client hands out (Lock.Context, the ctx of Do), and
// context.Cause of it. Ask one of them right before each step that touches
// the guarded resource.
//
// What no check can close is the window inside a step: a process paused
// after its check and before its write, or a loss the server has decided
// but not yet told (a force-release in flight). Only the guarded resource
// can close it: pass it Lock.Token and have it refuse tokens lower than the
// highest it has seen.
//
// The clock is one that counts a suspend of the whole machine (a laptop's
// lid, a virtual machine paused or restored from a snapshot):
// CLOCK_BOOTTIME on Linux (package clock). Go's monotonic clock, which
// time.Now carries, stops during a suspend, so a deadline measured on it
// would still be ahead after a resume while the server has moved the lock.
// The lock's goroutine wakes on timers that count the monotonic clock and
// are late by the suspend; every answer it gives (to a reply, a push, a
// question) reads the clock first, and it sees the loss at its next wake,
// a quarter lease after the resume at most. Where Go has no clock that
// counts a suspend (macOS, Windows, the BSDs), the client counts the wall
// clock's jumps ahead of the monotonic one as suspends: a step of the
// wall clock forward then ends a lock early, never late.
//
// # The heartbeat schedule
//
// Each lock's connection has one permanent reader, so the server's promotion
// of a waiter is seen the moment it arrives, and one loop that sends
// heartbeats, as docs/protocol.md prescribes:
//
//	baseInterval  = lease / 4
//	clientTimeout = lease * 0.8
//	safeRTT       = 2 * smoothedRTT  // EWMA of reply round trips, alpha 0.2
//	interval      = clamp(baseInterval - safeRTT, 1ms, baseInterval)
//
// The interval runs from the arrival of one reply to the send of the next
// heartbeat (not from send to send), and at most one heartbeat is in flight,
// so each reply answers the one request outstanding. Send to send, the gap
// is therefore the round trip plus the interval, about lease/4 − RTT: with a
// 400ms lease and a 30ms round trip, 40ms after each reply, 70ms between
// sends, and a confirmed request about every 100ms.
// The first round trip (that of ACQUIRE) seeds the average whole. The floor
// of 1ms only stops a slow link from driving the interval to zero; where
// lease/4 is below it, lease/4 wins. With a 10s lease on a 100ms round trip,
// a heartbeat leaves 2.3s after each reply.
//
// If the server confirms nothing for clientTimeout, counted from the write of
// the last request it answered, the client ends the session itself and
// reports ErrUnconfirmed. The server's lease runs from no earlier than that
// write, so a holder that keeps running learns of its loss at least 0.2 ×
// lease before the server can give the lock to another; a paused one learns
// of it at its first Lock.Err after it wakes (see above). A lease shorter
// than the round trip can therefore never be held: Acquire keeps trying
// until its context ends.
//
// # Errors by class
//
// The server ends a session with an ERROR code whose range is its class.
// Errors wrap the *wire.Error received (errors.As gives its Code), and the
// sentinels match by code, so errors.Is(err, ErrBusy) works.
//
//   - Server conditions: ErrShutdown, ErrOverloaded. While waiting, Acquire
//     reconnects by itself: at once after SHUTDOWN or a broken connection
//     (the next address if one fails, then with backoff), after a capped,
//     jittered backoff after OVERLOADED, each time at the end of the queue.
//     Once held, they end the lock like any loss.
//
//   - Sessions ended by the lock's rules: ErrLeaseExpired, ErrForceReleased,
//     ErrKicked, ErrBusy. Returned to the caller (a lapsed wait in the queue
//     is retried: the caller still wants the lock).
//
//   - Client errors: ErrProtocol, ErrBadRequest, ErrVersion, ErrUnauthorized,
//     ErrLimitMismatch. Never retried. Names, owners and leases are checked
//     before dialling, with the server's rules, as ErrBadRequest.
//
//   - No server answers (ErrNoAnswer): a server that accepted the
//     connection but did not answer the ACQUIRE within 0.8 × lease (at
//     most 5s), or none that accepts it after one had answered. Retried
//     after a backoff, the next address first, told to WithLogger (Warn)
//     and WithRetryFunc; when ctx ends without a place in a queue for that
//     reason, the error wraps ErrNoAnswer beside ctx's.
//
//   - The wrong port (ErrWrongPort): an HTTP server, or Baton's ops port,
//     which names the lock port in its answer. Never retried.
//
//   - A failed TLS handshake (ErrTLS): a server certificate this client
//     does not trust, or its own refused (then also ErrUnauthorized).
//     Never retried, never the error of a refused connection.
//
// If no address can be reached at all, Acquire fails at once rather than
// hide a misconfiguration, unless WithWaitForServer(true) asks it to wait,
// within ctx, for a server that is not up yet; once it has reached a
// server, it rides out restarts until its context ends. WithBackoff and
// WithRetries set the waits between retries and bound their number;
// IsRetryable says whether an error is worth a try of the caller's own.
//
// # Helpers
//
// Campaign waits to lead an election (a lock whose owner text is the
// candidate's value); the returned Leadership is a Lock, with Resign.
// Leader and Observe follow an election without campaigning, as etcd's
// Observe does, from the server's ops API (WithOpsAddrs, WithAdminToken):
// the lock protocol cannot say who holds a name.
// AcquireAll and DoAll take several locks in the byte order of their names,
// all or none, so that callers wanting overlapping sets cannot deadlock;
// the LockSet's context ends when any one is lost. Their options apply to
// every name, and ForName's to one: a reader of one name and the writer
// of another in one set. WithMaxHold ends a claim
// a set time after its grant, however well its heartbeats go. WithLogger
// logs connections, redirects, missed heartbeats and losses to a
// *slog.Logger; nothing is logged without it.
//
// # Resources
//
// A Client holds no connection; each Lock holds one, and two goroutines that
// end when the lock ends, released or lost.
package baton
