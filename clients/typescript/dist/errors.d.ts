/** Baton's errors: one root, loss, and one class per wire error code. */
/** The spec's name of an error code, or `0xNN` for an unknown one. */
export declare function codeName(code: number): string;
/** The root of every error this package throws. */
export declare class BatonError extends Error {
    name: string;
}
/**
 * The guarded resource has seen a higher fencing token for the lock (a
 * fencing kit's refusal): this holder lost the lock, nothing was written,
 * and the work must stop. `cause` is the resource's own error.
 */
export declare class StaleToken extends BatonError {
    name: string;
    /** The lock's name. */
    readonly lock: string;
    /** The refused token. */
    readonly token: bigint;
    constructor(lock: string, token: bigint, message: string, options?: {
        cause?: unknown;
    });
}
/**
 * A shared claim with a limit above 1 given to a fencing kit: its holders'
 * tokens are all current, and a mark per name would refuse the live ones
 * granted earlier. Fence per record instead (docs/fencing.md).
 */
export declare class SharedClaim extends BatonError {
    name: string;
}
/**
 * Ownership ended while the lock was held, for a reason other than release;
 * the guarded work must stop. `reason` is the error that ended it
 * (`Unconfirmed`, `ForceReleasedError`, `LeaseExpiredError`,
 * `ConnectionBroken`, `MaxHoldReached`, `ResumeRefusedError`,
 * `SupersededError`, `MovedError`, and `ShutdownError` or `NotLeaderError`
 * for a claim that could not move...).
 * `cause` is the same error, except where `withLock`'s callback failed
 * after the loss: there it is the callback's own error, so its stack is
 * kept.
 */
export declare class LockLost extends BatonError {
    name: string;
    /** The lock's name. */
    readonly lock: string;
    /** Why ownership ended. */
    readonly reason: Error;
    constructor(lock: string, reason: Error, cause?: unknown);
}
/**
 * The same Client already holds or waits for this name. Locks are not
 * re-entrant: a second claim would queue behind its own caller and, if the
 * caller waits for it, never be granted. Refused at once, without
 * connecting, unless `queueBehindSelf: true` asks for exactly that. A
 * `nowait` claim is not refused: it cannot wait, and the server answers
 * BusyError.
 */
export declare class AlreadyHeld extends BatonError {
    name: string;
}
/**
 * The claim ended itself after the `maxHoldMs` the caller set: the client
 * closed the connection (the server hands the lock on at once), and the
 * work must stop as after any other loss.
 */
export declare class MaxHoldReached extends BatonError {
    name: string;
}
/** The server confirmed nothing for 0.8 × lease: the client ended the session itself. */
export declare class Unconfirmed extends BatonError {
    name: string;
}
/** The connection to the server failed (reset, closed, unreachable). */
export declare class ConnectionBroken extends BatonError {
    name: string;
}
/** An ERROR frame from the server; `code` is its wire code. */
export declare class ServerError extends BatonError {
    name: string;
    readonly code: number;
    /** The server's text (for NOT_LEADER: the leader's address, or empty). */
    readonly serverMessage: string;
    constructor(code: number, message?: string);
    /** Codes 0x01-0x0F: the server's condition, not the client's fault. */
    get serverCondition(): boolean;
    /** Codes 0x20-0x2F: a bug or misconfiguration; never retried. */
    get clientError(): boolean;
}
/** SHUTDOWN (0x01): the server is going away. */
export declare class ShutdownError extends ServerError {
    name: string;
    constructor(message?: string);
}
/** OVERLOADED (0x02): a server limit refused the session. */
export declare class OverloadedError extends ServerError {
    name: string;
    constructor(message?: string);
}
/** NOT_LEADER (0x03): this node is not the cluster's leader. */
export declare class NotLeaderError extends ServerError {
    name: string;
    constructor(message?: string);
}
/** LEASE_EXPIRED (0x10): the server heard nothing for a whole lease. */
export declare class LeaseExpiredError extends ServerError {
    name: string;
    constructor(message?: string);
}
/** FORCE_RELEASED (0x11): an operator took the lock away. */
export declare class ForceReleasedError extends ServerError {
    name: string;
    constructor(message?: string);
}
/** KICKED (0x12): an operator removed this waiter from the queue. */
export declare class KickedError extends ServerError {
    name: string;
    constructor(message?: string);
}
/** BUSY (0x13): nowait was asked for and the claim may not hold at once (the lock is held, every slot is taken, or others wait first). */
export declare class BusyError extends ServerError {
    name: string;
    constructor(message?: string);
}
/**
 * RESUME_REFUSED (0x14, version 3): the claim a move tried to continue
 * cannot be continued there (it ended, the window for resumes after a
 * crash closed, its credential is too old). A holder has lost the lock (a
 * new acquire is a new claim, with a new token); a waiter has lost its
 * place, and the client takes a new one by itself.
 */
export declare class ResumeRefusedError extends ServerError {
    name: string;
    constructor(message?: string);
}
/**
 * SUPERSEDED (0x15, version 3): after a crash, a resumed claim with a
 * higher token won the name. The claim had ended and its end never reached
 * this client (a TCP proxy that closed both sides, see docs/protocol.md
 * section 14): the client logs it as an error.
 */
export declare class SupersededError extends ServerError {
    name: string;
    constructor(message?: string);
}
/**
 * MOVED (0x16, version 3): the claim was resumed on another connection.
 * The client expects it on a connection its own move left; on the claim's
 * own connection, with no move of its own under way, it means that another
 * connection used the claim's credential: the lock is lost.
 */
export declare class MovedError extends ServerError {
    name: string;
    constructor(message?: string);
}
/** PROTOCOL (0x20): the server saw a malformed frame. */
export declare class ProtocolError extends ServerError {
    name: string;
    constructor(message?: string);
}
/** BAD_REQUEST (0x21): a bad name, lease or owner (also thrown before dialling). */
export declare class BadRequestError extends ServerError {
    name: string;
    constructor(message?: string);
}
/** VERSION (0x22): the server does not speak the claim's protocol version (version 2, for a shared claim, to a server older than shared claims). */
export declare class VersionError extends ServerError {
    name: string;
    constructor(message?: string);
}
/** UNAUTHORIZED (0x23): the server refused this client. */
export declare class UnauthorizedError extends ServerError {
    name: string;
    constructor(message?: string);
}
/**
 * LIMIT_MISMATCH (0x24): a shared claim's limit differs from the limit in
 * force for the name, which its other shared sessions (holding or waiting)
 * set. `limit` is that limit, from the server's message (undefined if the
 * message was not a number); `asked` is this claim's. The claim's
 * configuration disagrees with the name's other users: it is thrown at
 * once and never retried.
 */
export declare class LimitMismatchError extends ServerError {
    name: string;
    /** The limit in force for the name. */
    readonly limit: number | undefined;
    /** The limit this claim gave, when the client knows it. */
    readonly asked: number | undefined;
    constructor(message?: string, asked?: number);
}
/**
 * BAD_CREDENTIAL (0x25, version 3): the server does not recognise the
 * credential of a move (a claim of another cluster or data directory, a
 * client key that changed, a forgery): the claim is lost, never retried.
 */
export declare class BadCredentialError extends ServerError {
    name: string;
    constructor(message?: string);
}
/** The error for an ERROR frame: its class if the code is known. */
export declare function errorForCode(code: number, message?: string): ServerError;
/**
 * The TLS handshake with a server failed on this side: its certificate is
 * not one this client trusts (another CA, another name, expired). A
 * configuration to fix, never a server that is down: never retried, not
 * waited out by `waitForServer`, and never a ConnectionBroken, which a
 * refused connection is. (A server that refuses this client's certificate
 * answers with an UnauthorizedError, also never retried.)
 */
export declare class TLSError extends BatonError {
    name: string;
}
/**
 * An acquire whose `signal` timed out (`AbortSignal.timeout(ms)`) before
 * the grant. Its `cause` says why the wait had not ended: the last
 * attempt's error (the server never answered, a connection broke...), or
 * the signal's own TimeoutError when every attempt was a place in a
 * queue; `position` is the place it had, if it waited in one. Its name is
 * "TimeoutError", as the signal's.
 */
export declare class AcquireTimeoutError extends BatonError {
    name: string;
    /** The place in the queue when the time ran out; 0 if it had none. */
    readonly position: number;
    constructor(message: string, position: number, cause: unknown);
}
/**
 * Whether err, from an acquire (or the reason of a LockLost), is worth
 * another try of the same call: a condition of the servers or of the
 * network that may have passed, not a decision or a mistake that a new try
 * would meet again (Go's `baton.IsRetryable`). True for the server
 * conditions (ShutdownError, OverloadedError, NotLeaderError), Unconfirmed
 * and LeaseExpiredError, ResumeRefusedError and SupersededError (a claim
 * that could not be carried to the next server), ConnectionBroken (a
 * broken or refused connection: a wrong address looks the same, so bound
 * the tries), and an AcquireTimeoutError whose cause is one of those. False
 * for an operator's decision (ForceReleasedError, KickedError), BusyError,
 * MaxHoldReached, MovedError (another connection took the claim with its
 * credential), client errors (BadRequestError, UnauthorizedError,
 * VersionError, ProtocolError, LimitMismatchError, BadCredentialError,
 * AlreadyHeld), TLSError, and anything that is not this package's. The client never retries a held lock by
 * itself: a new try is a new grant, with a new token.
 */
export declare function isRetryable(err: unknown): boolean;
