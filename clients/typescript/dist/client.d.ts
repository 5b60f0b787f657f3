/** The Baton client: named locks where the TCP connection is the claim. */
import * as tls from "node:tls";
import { Session } from "./session.js";
export declare const DEFAULT_LEASE_MS = 10000;
export declare const DEFAULT_DIAL_TIMEOUT_MS = 5000;
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
}
/** Options of one acquire. */
export interface AcquireOptions {
    /** Throw BusyError at once if the lock is held, instead of waiting. */
    nowait?: boolean;
    /** Ends the wait: the acquire rejects with the signal's reason. */
    signal?: AbortSignal;
}
/** A lock held by this process: the claim is its connection. */
export declare class Held {
    private readonly session;
    /** The lock's name. */
    readonly name: string;
    /** The fencing token of this grant: pass it to the guarded resource. */
    readonly token: bigint;
    /** Aborted the moment ownership ends (its reason is a LockLost); never by release. */
    readonly signal: AbortSignal;
    constructor(session: Session);
    /** Throws the LockLost once ownership has ended. */
    check(): void;
    /** Closes the session: the release. The next waiter is promoted at once. Idempotent. */
    release(): Promise<void>;
}
/**
 * A Baton client for the servers at `addrs` (`host:port` each). Inputs the
 * server would refuse throw BadRequestError here, before any connection.
 */
export declare class Client {
    readonly addrs: readonly string[];
    readonly owner: string;
    readonly leaseMs: number;
    private readonly hosts;
    private readonly tls?;
    private readonly dialTimeoutMs;
    private readonly normalClose;
    private last;
    constructor(addrs: string[] | string, opts?: ClientOptions);
    /** Waits for the lock and resolves with it held. Release it with `held.release()`. */
    acquire(name: string, opts?: AcquireOptions): Promise<Held>;
    /**
     * Runs fn while holding the lock, and releases it after. fn gets a signal
     * aborted the moment ownership ends; withLock rejects with LockLost if
     * ownership ended while fn ran.
     */
    withLock<T>(name: string, fn: (signal: AbortSignal, held: Held) => Promise<T> | T, opts?: AcquireOptions): Promise<T>;
    /**
     * Connects to address i: the socket that carries the protocol (TLS or
     * TCP), and the TCP socket under it, which a release resets (a TLS
     * socket cannot be reset itself).
     */
    private dial;
}
