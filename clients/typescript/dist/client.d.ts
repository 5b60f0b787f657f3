/** The Baton client: named locks where the TCP connection is the claim. */
import * as tls from "node:tls";
import { Leadership } from "./election.js";
import { Held } from "./held.js";
import { type Logger } from "./log.js";
import { HeldMany } from "./many.js";
export declare const DEFAULT_LEASE_MS = 10000;
export declare const DEFAULT_DIAL_TIMEOUT_MS = 5000;
/**
 * The limit of a reader's claim (`shared: true` without a limit): the
 * largest the protocol carries, as close to "no limit" as a shared claim
 * gets. Every reader of a name must give the same limit, so it is one fixed
 * number, the same in every Baton client.
 */
export declare const READER_LIMIT = 65535;
/** Options of a Client. */
export interface ClientOptions {
    /** The lease in ms: after this long of silence the server moves the lock. Default 10 s. */
    leaseMs?: number;
    /** Who this is, for operators (default `hostname:pid`). */
    owner?: string;
    /** TLS options (ca, cert, key, servername...); set to use TLS. */
    tls?: tls.ConnectionOptions;
    /** Bound of each connection attempt, TLS included, in ms. Default 5 s. */
    dialTimeoutMs?: number;
    /**
     * Release (and give up a wait) with a normal close (FIN) instead of a
     * reset (RST), the default. The reset reaches the server at once as a
     * FIN does, and leaves no socket in TIME_WAIT here, where a claim storm
     * would run out of ports; but it is sent once, where a FIN is
     * retransmitted: on a network that loses it the lock is freed at the end
     * of the lease instead, later but never earlier.
     */
    normalClose?: boolean;
    /**
     * Told of connections (debug), redirects and reconnections (info),
     * heartbeat replies a quarter lease late and losses (warn). `console`
     * fits. Default: none.
     */
    logger?: Logger;
}
/** Options of one acquire. */
export interface AcquireOptions {
    /** Throw BusyError at once if the lock is held, instead of waiting. */
    nowait?: boolean;
    /** Ends the wait: the acquire rejects with the signal's reason. */
    signal?: AbortSignal;
    /**
     * Ends the claim this many ms after the grant, as a loss whose reason is
     * MaxHoldReached: a bound on the hold time, where the lease bounds only
     * silence. Default: none.
     */
    maxHoldMs?: number;
    /**
     * Called with the place in the queue (1 is next) on every WAITING reply:
     * the first answer and the reply to each heartbeat after it. It runs in
     * the session's socket handler and must return at once.
     */
    onWaiting?: (position: number) => void;
    /** The owner text of this claim, instead of the Client's. */
    owner?: string;
    /**
     * Take a place in the queue of a name this Client already holds or waits
     * for (granted after that other claim ends), instead of AlreadyHeld: to
     * hand a lock on between parts of one process.
     */
    queueBehindSelf?: boolean;
    /**
     * A slot of a counting semaphore of `limit` slots: at most `limit` shared
     * claims hold the name at once (1..65535). Every shared claim of a name
     * must give the same limit while the name has shared sessions: another
     * rejects with LimitMismatchError at once, never retried.
     */
    limit?: number;
    /**
     * A reader of a read/write lock: shared with the other readers (limit
     * READER_LIMIT unless `limit` gives one); writers are ordinary claims of
     * the same name. Without `shared` or `limit` a claim is exclusive.
     */
    shared?: boolean;
}
/** The kind of one name's claim in acquireMany: see AcquireOptions. */
export type ClaimKind = Pick<AcquireOptions, "shared" | "limit">;
/** Options of acquireMany: AcquireOptions that apply to the whole. */
export interface AcquireManyOptions {
    /** Ends the wait for the whole set: nothing stays held. */
    signal?: AbortSignal;
    /** Bounds each name's hold from its own grant (see AcquireOptions.maxHoldMs). */
    maxHoldMs?: number;
    /** Makes every claim of the set shared (see AcquireOptions.shared). */
    shared?: boolean;
    /** Makes every claim of the set a slot of `limit` (see AcquireOptions.limit). */
    limit?: number;
    /**
     * Gives names a kind of their own, in place of `shared` and `limit`:
     * `{ perName: { config: { shared: true } } }` holds a reader of config
     * beside the set's other claims. A name outside the set is refused.
     */
    perName?: Readonly<Record<string, ClaimKind>>;
}
/**
 * A Baton client for the servers at `addrs` (`host:port` each). Inputs the
 * server would refuse throw BadRequestError here, before any connection.
 *
 * Locks are not re-entrant: asking the same Client for a name it already
 * holds or waits for rejects with AlreadyHeld at once, unless
 * `queueBehindSelf: true`. Shared claims count slots: a Client may hold
 * several slots of one semaphore, fewer than its limit; a claim that its
 * own claims alone would keep waiting (a slot beyond the limit, any claim
 * beside its own exclusive one, an exclusive claim beside its own shared
 * ones) rejects with AlreadyHeld.
 */
export declare class Client {
    #private;
    readonly addrs: readonly string[];
    readonly owner: string;
    readonly leaseMs: number;
    constructor(addrs: string[] | string, opts?: ClientOptions);
    /** Waits for the lock and resolves with it held. Release it with `held.release()`, or `await using`. */
    acquire(name: string, opts?: AcquireOptions): Promise<Held>;
    /**
     * Runs fn while holding the lock, and releases it after. fn gets a signal
     * aborted when the client sees the loss; ask `held.check()` before each
     * step that touches the guarded resource. withLock rejects with a
     * LockLost if ownership ended while fn ran (when fn itself failed, its
     * error is the LockLost's cause).
     */
    withLock<T>(name: string, fn: (signal: AbortSignal, held: Held) => Promise<T> | T, opts?: AcquireOptions): Promise<T>;
    /**
     * Holds every name or none: acquires them in sorted order (so two callers
     * with overlapping sets cannot deadlock), and on any failure releases the
     * ones it holds. The HeldMany's signal is aborted when any one is lost.
     */
    acquireMany(names: readonly string[], opts?: AcquireManyOptions): Promise<HeldMany>;
    /** Runs fn while holding every name (see acquireMany and withLock). */
    withLocks<T>(names: readonly string[], fn: (signal: AbortSignal, many: HeldMany) => Promise<T> | T, opts?: AcquireManyOptions): Promise<T>;
    /**
     * Waits until this candidate leads `name`, with `value` as the owner text
     * operators see, and resolves with the Leadership; `resign()` gives it up
     * and the next candidate leads at once.
     */
    campaign(name: string, value: string, opts?: Pick<AcquireOptions, "signal" | "onWaiting">): Promise<Leadership>;
}
