/** One session: one connection, one claim on one lock (internal). */
import type { Socket } from "node:net";
import type { Clock } from "./clock.js";
import { BatonError } from "./errors.js";
import type { Logger } from "./log.js";
/** The floor of the heartbeat interval, in ms (see the Go client's heartbeat.go). */
export declare const MIN_HEARTBEAT_INTERVAL_MS = 1;
/** The server sent a frame that no server may send. */
export declare class Violation extends BatonError {
    name: string;
}
/**
 * The heartbeat schedule of docs/protocol.md: base = lease/4; timeout = 0.8 ×
 * lease; srtt an EWMA (alpha 0.2) of reply round trips, the first sample
 * taken whole; interval = clamp(base − 2 × srtt, min, base), from the reply.
 */
export declare class Schedule {
    readonly leaseMs: number;
    srtt: number;
    samples: number;
    constructor(leaseMs: number);
    observe(rtt: number): void;
    get timeout(): number;
    interval(): number;
}
export type State = "waiting" | "held" | "ended";
/** What a session needs besides its socket. */
export interface SessionOptions {
    /** A close the client chooses resets the connection (RST). */
    reset: boolean;
    /** Ends the claim this long after the grant (ms). */
    maxHoldMs?: number;
    /** Called with the place in the queue on each WAITING reply. */
    onWaiting?: (position: number) => void;
    /** Once held, the socket and the timer do not keep the process alive. */
    unref?: boolean;
    log: Required<Logger>;
    /** The clock of the deadlines (clock.ts): it counts a suspend of the machine. */
    clock: Clock;
}
/**
 * The session's socket 'data' handler is its permanent reader, so a
 * promotion push is seen the moment it arrives; one timer is its clock: the
 * next heartbeat (at most one in flight), the reply a quarter lease late,
 * the deadline (0.8 × lease from the send of the last request the server
 * answered) and the hold limit. A blocked event loop runs no timer, so
 * `expireIfLate` lets any question about the lock read the clock itself.
 *
 * Every time kept here is a reading of `opts.clock`, which counts a suspend
 * of the machine; the timer counts the monotonic clock, which does not, and
 * after a suspend fires late: the tick reads the clock, and never takes
 * the timer's firing for the deadline.
 */
export declare class Session {
    private readonly sock;
    private readonly raw;
    readonly addr: string;
    readonly name: string;
    private readonly opts;
    state: State;
    token: bigint;
    position: number;
    replied: boolean;
    /** Why it ended; undefined after a release. */
    error?: Error;
    /** The loss's reason, once held and lost. */
    cause?: Error;
    readonly controller: AbortController;
    readonly sched: Schedule;
    private sentAt;
    private deadline;
    private pending;
    private nextBeat?;
    private missAt?;
    private holdUntil?;
    private buf;
    private closing;
    private timer?;
    private listeners;
    private closed;
    /**
     * sock carries the protocol; raw is the TCP socket under it (sock itself
     * without TLS), which a close the client chooses resets.
     */
    constructor(sock: Socket, raw: Socket, addr: string, name: string, leaseMs: number, acquire: Buffer, opts: SessionOptions);
    /** Calls f at every change of state (held, ended). */
    onChange(f: () => void): () => void;
    /** The performance.now() from which the lock must be taken as lost: the time left now, from now. */
    validUntil(): number;
    /** Ends a held lock whose deadline has passed: the clock decides, not whether a timer has run. */
    expireIfLate(): void;
    /**
     * Ends the session from outside: the release, or giving up the place in
     * the queue. The socket is closed at once, with a reset (RST, the
     * default: the TCP socket under TLS, without close_notify) or a FIN
     * (normalClose). Ends the client did not choose (the server's ERROR or
     * close, a lost confirmation) close with a FIN (end).
     */
    close(): Promise<void>;
    private notify;
    private overdue;
    private arm;
    private tick;
    private unconfirmed;
    private end;
    private onData;
    private reportPosition;
    private grant;
}
