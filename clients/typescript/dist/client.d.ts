/** The Baton client: named locks where the TCP connection is the claim. */
import * as tls from "node:tls";
import { Leadership } from "./election.js";
import { Held } from "./held.js";
import { type Logger } from "./log.js";
import { HeldMany } from "./many.js";
import { type Leader } from "./ops.js";
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
    /**
     * Let the process exit while a lock is held: once granted, the socket
     * and timer of a claim do not keep Node.js's event loop alive
     * (`socket.unref()`), so a program that is done exits, and its exit is
     * the release. A wait still keeps the process alive. Default false: a
     * held lock keeps the process alive, as an open socket does, until it is
     * released. AcquireOptions can set it per claim.
     */
    unref?: boolean;
    /**
     * Wait, within the acquire's signal, for a server that is not up yet: an
     * address that refuses the connection is tried again with the backoff.
     * Default false: when no server has answered the first attempt, the
     * acquire rejects at once (a wrong address looks the same). A TLSError is
     * never waited out.
     */
    waitForServer?: boolean;
    /**
     * The waits between retries while waiting (after OVERLOADED, a broken
     * connection...): the first is `baseMs`, each next twice the last, up to
     * `capMs`, each jittered down to half. Default 50 ms and 2000 ms.
     */
    backoff?: {
        baseMs: number;
        capMs: number;
    };
    /**
     * How many failed attempts in a row are tried again before the acquire
     * rejects with the last one's error; an attempt the server answered
     * starts the count again. Default: no bound but the signal.
     */
    retries?: number;
    /**
     * The server's ops API (`host:port`, https with `tls`, or an http(s)://
     * URL; one per node of a cluster), for leader() and observe(): the lock
     * protocol cannot say who holds a name.
     */
    opsAddrs?: string[];
    /** The ops API's bearer token (the server's -admin-token-file), for leader() and observe(). */
    adminToken?: string;
    /**
     * Let claims move to the next server (protocol version 3, the default):
     * when the server side ends a claim's connection (a restart, a change of
     * leader, a crash), a holder keeps its lock and token and a waiter its
     * place, within the claim's deadline. `false` sends today's version 1 and
     * 2 frames, and a claim ends with its connection. Turn it off for clients
     * that reach the servers through a TCP proxy that terminates connections
     * (docs/protocol.md section 14). AcquireOptions can set it per claim.
     */
    resume?: boolean;
}
/**
 * What a waiter knows of its wait, for `onWaitState`: its place in the
 * queue (1 is next), and `graceMs`, how long the server still grants
 * nothing (a crash or failover grace), when the server tells. Protocol
 * versions 1 and 2 do not carry it, so it is undefined today; `baton
 * locks`, `baton run` and the dashboard show it from the ops API.
 */
export interface WaitState {
    readonly position: number;
    readonly graceMs?: number;
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
    /**
     * Called with the WaitState on every WAITING reply, as onWaiting is with
     * the position (both may be given); it runs in the session's socket
     * handler and must return at once.
     */
    onWaitState?: (state: WaitState) => void;
    /** As ClientOptions.unref, for this claim. */
    unref?: boolean;
    /** As ClientOptions.resume, for this claim. */
    resume?: boolean;
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
    /** As ClientOptions.resume, for every claim of the set. */
    resume?: boolean;
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
    /**
     * The leader of election `name` now (its value and the token of its
     * term), or undefined if nobody leads: from the ops API (opsAddrs).
     */
    leader(name: string, opts?: {
        signal?: AbortSignal;
    }): Promise<Leader | undefined>;
    /**
     * Follows election `name` without campaigning, as etcd's Observe does:
     * yields the leader when it starts (if one leads), then each new leader
     * as it is granted the name, each once, in order, until `signal` aborts
     * (or the caller stops iterating). It follows the ops API's event stream
     * (opsAddrs), reconnecting by itself with the Client's backoff.
     *
     * @example
     * for await (const l of client.observe("web/primary", { signal })) console.log(l.value, l.token);
     */
    observe(name: string, opts?: {
        signal?: AbortSignal;
    }): AsyncIterable<Leader>;
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
    campaign(name: string, value: string, opts?: Pick<AcquireOptions, "signal" | "onWaiting" | "onWaitState" | "unref" | "resume">): Promise<Leadership>;
}
