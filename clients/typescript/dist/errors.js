"use strict";
/** Baton's errors: one root, loss, and one class per wire error code. */
Object.defineProperty(exports, "__esModule", { value: true });
exports.AcquireTimeoutError = exports.TLSError = exports.BadCredentialError = exports.LimitMismatchError = exports.UnauthorizedError = exports.VersionError = exports.BadRequestError = exports.ProtocolError = exports.MovedError = exports.SupersededError = exports.ResumeRefusedError = exports.BusyError = exports.KickedError = exports.ForceReleasedError = exports.LeaseExpiredError = exports.NotLeaderError = exports.OverloadedError = exports.ShutdownError = exports.ServerError = exports.ConnectionBroken = exports.Unconfirmed = exports.MaxHoldReached = exports.AlreadyHeld = exports.LockLost = exports.SharedClaim = exports.StaleToken = exports.BatonError = void 0;
exports.codeName = codeName;
exports.errorForCode = errorForCode;
exports.isRetryable = isRetryable;
const NAMES = {
    0x01: "SHUTDOWN",
    0x02: "OVERLOADED",
    0x03: "NOT_LEADER",
    0x10: "LEASE_EXPIRED",
    0x11: "FORCE_RELEASED",
    0x12: "KICKED",
    0x13: "BUSY",
    0x14: "RESUME_REFUSED",
    0x15: "SUPERSEDED",
    0x16: "MOVED",
    0x20: "PROTOCOL",
    0x21: "BAD_REQUEST",
    0x22: "VERSION",
    0x23: "UNAUTHORIZED",
    0x24: "LIMIT_MISMATCH",
    0x25: "BAD_CREDENTIAL",
};
/** The spec's name of an error code, or `0xNN` for an unknown one. */
function codeName(code) {
    return NAMES[code] ?? `0x${code.toString(16).padStart(2, "0")}`;
}
/** The root of every error this package throws. */
class BatonError extends Error {
    name = "BatonError";
}
exports.BatonError = BatonError;
/**
 * The guarded resource has seen a higher fencing token for the lock (a
 * fencing kit's refusal): this holder lost the lock, nothing was written,
 * and the work must stop. `cause` is the resource's own error.
 */
class StaleToken extends BatonError {
    name = "StaleToken";
    /** The lock's name. */
    lock;
    /** The refused token. */
    token;
    constructor(lock, token, message, options) {
        super(`fence: lock ${JSON.stringify(lock)}: ${message}`, options);
        this.lock = lock;
        this.token = token;
    }
}
exports.StaleToken = StaleToken;
/**
 * A shared claim with a limit above 1 given to a fencing kit: its holders'
 * tokens are all current, and a mark per name would refuse the live ones
 * granted earlier. Fence per record instead (docs/fencing.md).
 */
class SharedClaim extends BatonError {
    name = "SharedClaim";
}
exports.SharedClaim = SharedClaim;
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
class LockLost extends BatonError {
    name = "LockLost";
    /** The lock's name. */
    lock;
    /** Why ownership ended. */
    reason;
    constructor(lock, reason, cause = reason) {
        super(`lock ${JSON.stringify(lock)} lost: ${reason.message}`, { cause });
        this.lock = lock;
        this.reason = reason;
    }
}
exports.LockLost = LockLost;
/**
 * The same Client already holds or waits for this name. Locks are not
 * re-entrant: a second claim would queue behind its own caller and, if the
 * caller waits for it, never be granted. Refused at once, without
 * connecting, unless `queueBehindSelf: true` asks for exactly that. A
 * `nowait` claim is not refused: it cannot wait, and the server answers
 * BusyError.
 */
class AlreadyHeld extends BatonError {
    name = "AlreadyHeld";
}
exports.AlreadyHeld = AlreadyHeld;
/**
 * The claim ended itself after the `maxHoldMs` the caller set: the client
 * closed the connection (the server hands the lock on at once), and the
 * work must stop as after any other loss.
 */
class MaxHoldReached extends BatonError {
    name = "MaxHoldReached";
}
exports.MaxHoldReached = MaxHoldReached;
/** The server confirmed nothing for 0.8 × lease: the client ended the session itself. */
class Unconfirmed extends BatonError {
    name = "Unconfirmed";
}
exports.Unconfirmed = Unconfirmed;
/** The connection to the server failed (reset, closed, unreachable). */
class ConnectionBroken extends BatonError {
    name = "ConnectionBroken";
}
exports.ConnectionBroken = ConnectionBroken;
/** An ERROR frame from the server; `code` is its wire code. */
class ServerError extends BatonError {
    name = "ServerError";
    code;
    /** The server's text (for NOT_LEADER: the leader's address, or empty). */
    serverMessage;
    constructor(code, message = "") {
        super(message ? `${codeName(code)}: ${message}` : codeName(code));
        this.code = code;
        this.serverMessage = message;
    }
    /** Codes 0x01-0x0F: the server's condition, not the client's fault. */
    get serverCondition() {
        return this.code >= 0x01 && this.code <= 0x0f;
    }
    /** Codes 0x20-0x2F: a bug or misconfiguration; never retried. */
    get clientError() {
        return this.code >= 0x20 && this.code <= 0x2f;
    }
}
exports.ServerError = ServerError;
/** SHUTDOWN (0x01): the server is going away. */
class ShutdownError extends ServerError {
    name = "ShutdownError";
    constructor(message = "") { super(0x01, message); }
}
exports.ShutdownError = ShutdownError;
/** OVERLOADED (0x02): a server limit refused the session. */
class OverloadedError extends ServerError {
    name = "OverloadedError";
    constructor(message = "") { super(0x02, message); }
}
exports.OverloadedError = OverloadedError;
/** NOT_LEADER (0x03): this node is not the cluster's leader. */
class NotLeaderError extends ServerError {
    name = "NotLeaderError";
    constructor(message = "") { super(0x03, message); }
}
exports.NotLeaderError = NotLeaderError;
/** LEASE_EXPIRED (0x10): the server heard nothing for a whole lease. */
class LeaseExpiredError extends ServerError {
    name = "LeaseExpiredError";
    constructor(message = "") { super(0x10, message); }
}
exports.LeaseExpiredError = LeaseExpiredError;
/** FORCE_RELEASED (0x11): an operator took the lock away. */
class ForceReleasedError extends ServerError {
    name = "ForceReleasedError";
    constructor(message = "") { super(0x11, message); }
}
exports.ForceReleasedError = ForceReleasedError;
/** KICKED (0x12): an operator removed this waiter from the queue. */
class KickedError extends ServerError {
    name = "KickedError";
    constructor(message = "") { super(0x12, message); }
}
exports.KickedError = KickedError;
/** BUSY (0x13): nowait was asked for and the claim may not hold at once (the lock is held, every slot is taken, or others wait first). */
class BusyError extends ServerError {
    name = "BusyError";
    constructor(message = "") { super(0x13, message); }
}
exports.BusyError = BusyError;
/**
 * RESUME_REFUSED (0x14, version 3): the claim a move tried to continue
 * cannot be continued there (it ended, the window for resumes after a
 * crash closed, its credential is too old). A holder has lost the lock (a
 * new acquire is a new claim, with a new token); a waiter has lost its
 * place, and the client takes a new one by itself.
 */
class ResumeRefusedError extends ServerError {
    name = "ResumeRefusedError";
    constructor(message = "") { super(0x14, message); }
}
exports.ResumeRefusedError = ResumeRefusedError;
/**
 * SUPERSEDED (0x15, version 3): after a crash, a resumed claim with a
 * higher token won the name. The claim had ended and its end never reached
 * this client (a TCP proxy that closed both sides, see docs/protocol.md
 * section 14): the client logs it as an error.
 */
class SupersededError extends ServerError {
    name = "SupersededError";
    constructor(message = "") { super(0x15, message); }
}
exports.SupersededError = SupersededError;
/**
 * MOVED (0x16, version 3): the claim was resumed on another connection.
 * The client expects it on a connection its own move left; on the claim's
 * own connection, with no move of its own under way, it means that another
 * connection used the claim's credential: the lock is lost.
 */
class MovedError extends ServerError {
    name = "MovedError";
    constructor(message = "") { super(0x16, message); }
}
exports.MovedError = MovedError;
/** PROTOCOL (0x20): the server saw a malformed frame. */
class ProtocolError extends ServerError {
    name = "ProtocolError";
    constructor(message = "") { super(0x20, message); }
}
exports.ProtocolError = ProtocolError;
/** BAD_REQUEST (0x21): a bad name, lease or owner (also thrown before dialling). */
class BadRequestError extends ServerError {
    name = "BadRequestError";
    constructor(message = "") { super(0x21, message); }
}
exports.BadRequestError = BadRequestError;
/** VERSION (0x22): the server does not speak the claim's protocol version (version 2, for a shared claim, to a server older than shared claims). */
class VersionError extends ServerError {
    name = "VersionError";
    constructor(message = "") { super(0x22, message); }
}
exports.VersionError = VersionError;
/** UNAUTHORIZED (0x23): the server refused this client. */
class UnauthorizedError extends ServerError {
    name = "UnauthorizedError";
    constructor(message = "") { super(0x23, message); }
}
exports.UnauthorizedError = UnauthorizedError;
/**
 * LIMIT_MISMATCH (0x24): a shared claim's limit differs from the limit in
 * force for the name, which its other shared sessions (holding or waiting)
 * set. `limit` is that limit, from the server's message (undefined if the
 * message was not a number); `asked` is this claim's. The claim's
 * configuration disagrees with the name's other users: it is thrown at
 * once and never retried.
 */
class LimitMismatchError extends ServerError {
    name = "LimitMismatchError";
    /** The limit in force for the name. */
    limit;
    /** The limit this claim gave, when the client knows it. */
    asked;
    constructor(message = "", asked) {
        super(0x24, message);
        this.limit = /^[0-9]+$/.test(message) ? Number(message) : undefined;
        this.asked = asked;
        if (this.limit !== undefined) {
            this.message = `LIMIT_MISMATCH: the name's limit in force is ${this.limit}` + (asked === undefined ? "" : `, this claim's is ${asked}`);
        }
        else if (asked !== undefined) {
            this.message += ` (this claim's limit is ${asked})`;
        }
    }
}
exports.LimitMismatchError = LimitMismatchError;
/**
 * BAD_CREDENTIAL (0x25, version 3): the server does not recognise the
 * credential of a move (a claim of another cluster or data directory, a
 * client key that changed, a forgery): the claim is lost, never retried.
 */
class BadCredentialError extends ServerError {
    name = "BadCredentialError";
    constructor(message = "") { super(0x25, message); }
}
exports.BadCredentialError = BadCredentialError;
const CLASSES = {
    0x01: ShutdownError,
    0x02: OverloadedError,
    0x03: NotLeaderError,
    0x10: LeaseExpiredError,
    0x11: ForceReleasedError,
    0x12: KickedError,
    0x13: BusyError,
    0x14: ResumeRefusedError,
    0x15: SupersededError,
    0x16: MovedError,
    0x20: ProtocolError,
    0x21: BadRequestError,
    0x22: VersionError,
    0x23: UnauthorizedError,
    0x24: LimitMismatchError,
    0x25: BadCredentialError,
};
/** The error for an ERROR frame: its class if the code is known. */
function errorForCode(code, message = "") {
    const C = CLASSES[code];
    return C ? new C(message) : new ServerError(code, message);
}
/**
 * The TLS handshake with a server failed on this side: its certificate is
 * not one this client trusts (another CA, another name, expired). A
 * configuration to fix, never a server that is down: never retried, not
 * waited out by `waitForServer`, and never a ConnectionBroken, which a
 * refused connection is. (A server that refuses this client's certificate
 * answers with an UnauthorizedError, also never retried.)
 */
class TLSError extends BatonError {
    name = "TLSError";
}
exports.TLSError = TLSError;
/**
 * An acquire whose `signal` timed out (`AbortSignal.timeout(ms)`) before
 * the grant. Its `cause` says why the wait had not ended: the last
 * attempt's error (the server never answered, a connection broke...), or
 * the signal's own TimeoutError when every attempt was a place in a
 * queue; `position` is the place it had, if it waited in one. Its name is
 * "TimeoutError", as the signal's.
 */
class AcquireTimeoutError extends BatonError {
    name = "TimeoutError";
    /** The place in the queue when the time ran out; 0 if it had none. */
    position;
    constructor(message, position, cause) {
        super(message, { cause });
        this.position = position;
    }
}
exports.AcquireTimeoutError = AcquireTimeoutError;
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
function isRetryable(err) {
    if (err instanceof LockLost)
        err = err.reason;
    if (err instanceof AcquireTimeoutError)
        return err.cause !== err && isRetryable(err.cause);
    if (err instanceof TLSError)
        return false;
    if (err instanceof ServerError)
        return err.serverCondition || err.code === 0x10 || err.code === 0x14 || err.code === 0x15;
    return err instanceof Unconfirmed || err instanceof ConnectionBroken;
}
