/** Baton's errors: one root, loss, and one class per wire error code. */

const NAMES: Record<number, string> = {
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
export function codeName(code: number): string {
  return NAMES[code] ?? `0x${code.toString(16).padStart(2, "0")}`;
}

/** The root of every error this package throws. */
export class BatonError extends Error {
  override name = "BatonError";
}

/**
 * The guarded resource has seen a higher fencing token for the lock (a
 * fencing kit's refusal): this holder lost the lock, nothing was written,
 * and the work must stop. `cause` is the resource's own error.
 */
export class StaleToken extends BatonError {
  override name = "StaleToken";
  /** The lock's name. */
  readonly lock: string;
  /** The refused token. */
  readonly token: bigint;
  constructor(lock: string, token: bigint, message: string, options?: { cause?: unknown }) {
    super(`fence: lock ${JSON.stringify(lock)}: ${message}`, options);
    this.lock = lock;
    this.token = token;
  }
}

/**
 * A shared claim with a limit above 1 given to a fencing kit: its holders'
 * tokens are all current, and a mark per name would refuse the live ones
 * granted earlier. Fence per record instead (docs/fencing.md).
 */
export class SharedClaim extends BatonError {
  override name = "SharedClaim";
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
export class LockLost extends BatonError {
  override name = "LockLost";
  /** The lock's name. */
  readonly lock: string;
  /** Why ownership ended. */
  readonly reason: Error;
  constructor(lock: string, reason: Error, cause: unknown = reason) {
    super(`lock ${JSON.stringify(lock)} lost: ${reason.message}`, { cause });
    this.lock = lock;
    this.reason = reason;
  }
}

/**
 * The same Client already holds or waits for this name. Locks are not
 * re-entrant: a second claim would queue behind its own caller and, if the
 * caller waits for it, never be granted. Refused at once, without
 * connecting, unless `queueBehindSelf: true` asks for exactly that. A
 * `nowait` claim is not refused: it cannot wait, and the server answers
 * BusyError.
 */
export class AlreadyHeld extends BatonError {
  override name = "AlreadyHeld";
}

/**
 * The claim ended itself after the `maxHoldMs` the caller set: the client
 * closed the connection (the server hands the lock on at once), and the
 * work must stop as after any other loss.
 */
export class MaxHoldReached extends BatonError {
  override name = "MaxHoldReached";
}

/** The server confirmed nothing for 0.8 × lease: the client ended the session itself. */
export class Unconfirmed extends BatonError {
  override name = "Unconfirmed";
}

/** The connection to the server failed (reset, closed, unreachable). */
export class ConnectionBroken extends BatonError {
  override name = "ConnectionBroken";
}

/** An ERROR frame from the server; `code` is its wire code. */
export class ServerError extends BatonError {
  override name = "ServerError";
  readonly code: number;
  /** The server's text (for NOT_LEADER: the leader's address, or empty). */
  readonly serverMessage: string;
  constructor(code: number, message = "") {
    super(message ? `${codeName(code)}: ${message}` : codeName(code));
    this.code = code;
    this.serverMessage = message;
  }
  /** Codes 0x01-0x0F: the server's condition, not the client's fault. */
  get serverCondition(): boolean {
    return this.code >= 0x01 && this.code <= 0x0f;
  }
  /** Codes 0x20-0x2F: a bug or misconfiguration; never retried. */
  get clientError(): boolean {
    return this.code >= 0x20 && this.code <= 0x2f;
  }
}

/** SHUTDOWN (0x01): the server is going away. */
export class ShutdownError extends ServerError {
  override name = "ShutdownError";
  constructor(message = "") { super(0x01, message); }
}
/** OVERLOADED (0x02): a server limit refused the session. */
export class OverloadedError extends ServerError {
  override name = "OverloadedError";
  constructor(message = "") { super(0x02, message); }
}
/** NOT_LEADER (0x03): this node is not the cluster's leader. */
export class NotLeaderError extends ServerError {
  override name = "NotLeaderError";
  constructor(message = "") { super(0x03, message); }
}
/** LEASE_EXPIRED (0x10): the server heard nothing for a whole lease. */
export class LeaseExpiredError extends ServerError {
  override name = "LeaseExpiredError";
  constructor(message = "") { super(0x10, message); }
}
/** FORCE_RELEASED (0x11): an operator took the lock away. */
export class ForceReleasedError extends ServerError {
  override name = "ForceReleasedError";
  constructor(message = "") { super(0x11, message); }
}
/** KICKED (0x12): an operator removed this waiter from the queue. */
export class KickedError extends ServerError {
  override name = "KickedError";
  constructor(message = "") { super(0x12, message); }
}
/** BUSY (0x13): nowait was asked for and the claim may not hold at once (the lock is held, every slot is taken, or others wait first). */
export class BusyError extends ServerError {
  override name = "BusyError";
  constructor(message = "") { super(0x13, message); }
}
/**
 * RESUME_REFUSED (0x14, version 3): the claim a move tried to continue
 * cannot be continued there (it ended, the window for resumes after a
 * crash closed, its credential is too old). A holder has lost the lock (a
 * new acquire is a new claim, with a new token); a waiter has lost its
 * place, and the client takes a new one by itself.
 */
export class ResumeRefusedError extends ServerError {
  override name = "ResumeRefusedError";
  constructor(message = "") { super(0x14, message); }
}
/**
 * SUPERSEDED (0x15, version 3): after a crash, a resumed claim with a
 * higher token won the name. The claim had ended and its end never reached
 * this client (a TCP proxy that closed both sides, see docs/protocol.md
 * section 14): the client logs it as an error.
 */
export class SupersededError extends ServerError {
  override name = "SupersededError";
  constructor(message = "") { super(0x15, message); }
}
/**
 * MOVED (0x16, version 3): the claim was resumed on another connection.
 * The client expects it on a connection its own move left; on the claim's
 * own connection, with no move of its own under way, it means that another
 * connection used the claim's credential: the lock is lost.
 */
export class MovedError extends ServerError {
  override name = "MovedError";
  constructor(message = "") { super(0x16, message); }
}
/** PROTOCOL (0x20): the server saw a malformed frame. */
export class ProtocolError extends ServerError {
  override name = "ProtocolError";
  constructor(message = "") { super(0x20, message); }
}
/** BAD_REQUEST (0x21): a bad name, lease or owner (also thrown before dialling). */
export class BadRequestError extends ServerError {
  override name = "BadRequestError";
  constructor(message = "") { super(0x21, message); }
}
/** VERSION (0x22): the server does not speak the claim's protocol version (version 2, for a shared claim, to a server older than shared claims). */
export class VersionError extends ServerError {
  override name = "VersionError";
  constructor(message = "") { super(0x22, message); }
}
/** UNAUTHORIZED (0x23): the server refused this client. */
export class UnauthorizedError extends ServerError {
  override name = "UnauthorizedError";
  constructor(message = "") { super(0x23, message); }
}

/**
 * LIMIT_MISMATCH (0x24): a shared claim's limit differs from the limit in
 * force for the name, which its other shared sessions (holding or waiting)
 * set. `limit` is that limit, from the server's message (undefined if the
 * message was not a number); `asked` is this claim's. The claim's
 * configuration disagrees with the name's other users: it is thrown at
 * once and never retried.
 */
export class LimitMismatchError extends ServerError {
  override name = "LimitMismatchError";
  /** The limit in force for the name. */
  readonly limit: number | undefined;
  /** The limit this claim gave, when the client knows it. */
  readonly asked: number | undefined;
  constructor(message = "", asked?: number) {
    super(0x24, message);
    this.limit = /^[0-9]+$/.test(message) ? Number(message) : undefined;
    this.asked = asked;
    if (this.limit !== undefined) {
      this.message = `LIMIT_MISMATCH: the name's limit in force is ${this.limit}` + (asked === undefined ? "" : `, this claim's is ${asked}`);
    } else if (asked !== undefined) {
      this.message += ` (this claim's limit is ${asked})`;
    }
  }
}

/**
 * BAD_CREDENTIAL (0x25, version 3): the server does not recognise the
 * credential of a move (a claim of another cluster or data directory, a
 * client key that changed, a forgery): the claim is lost, never retried.
 */
export class BadCredentialError extends ServerError {
  override name = "BadCredentialError";
  constructor(message = "") { super(0x25, message); }
}

const CLASSES: Record<number, new (message?: string) => ServerError> = {
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
export function errorForCode(code: number, message = ""): ServerError {
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
export class TLSError extends BatonError {
  override name = "TLSError";
}

/**
 * An acquire whose `signal` timed out (`AbortSignal.timeout(ms)`) before
 * the grant. Its `cause` says why the wait had not ended: the last
 * attempt's error (the server never answered, a connection broke...), or
 * the signal's own TimeoutError when every attempt was a place in a
 * queue; `position` is the place it had, if it waited in one. Its name is
 * "TimeoutError", as the signal's.
 */
export class AcquireTimeoutError extends BatonError {
  override name = "TimeoutError";
  /** The place in the queue when the time ran out; 0 if it had none. */
  readonly position: number;
  constructor(message: string, position: number, cause: unknown) {
    super(message, { cause });
    this.position = position;
  }
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
export function isRetryable(err: unknown): boolean {
  if (err instanceof LockLost) err = err.reason;
  if (err instanceof AcquireTimeoutError) return err.cause !== err && isRetryable(err.cause);
  if (err instanceof TLSError) return false;
  if (err instanceof ServerError) return err.serverCondition || err.code === 0x10 || err.code === 0x14 || err.code === 0x15;
  return err instanceof Unconfirmed || err instanceof ConnectionBroken;
}
