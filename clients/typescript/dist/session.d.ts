/**
 * One claim on one lock (internal): one connection at a time, or, while
 * the claim moves to another server (protocol version 3, docs/protocol.md
 * section 14), the claim's connection, its open resume attempts and the
 * connections it has left.
 */
import type { Socket } from "node:net";
import { inspect } from "node:util";
import type { Clock } from "./clock.js";
import { Violation } from "./conn.js";
import type { Logger } from "./log.js";
export { Violation };
export { REDIRECT_BUDGET } from "./move.js";
/** The floor of the heartbeat interval, in ms (see the Go client's heartbeat.go). */
export declare const MIN_HEARTBEAT_INTERVAL_MS = 1;
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
    /** A new connection: its first round trip is the first sample. */
    restart(rtt: number): void;
    get timeout(): number;
    interval(): number;
}
export type State = "waiting" | "held" | "ended";
/** How a claim reaches the servers when it moves: the client's addresses and dialler. */
export interface Mover {
    readonly addrs: readonly string[];
    /** Connects to addrs[i] (TLS included): the socket of the protocol and the TCP socket under it. */
    dial(i: number, signal: AbortSignal): Promise<[Socket, Socket]>;
    /** addrs[i] answered VERSION to a version 3 frame: it speaks version 2 at most. */
    speaksV2(i: number): void;
}
/** What a session needs besides its first socket. */
export interface SessionOptions {
    /** A close the client chooses resets the connection (RST). */
    reset: boolean;
    /** Ends the claim this long after the grant (ms). */
    maxHoldMs?: number;
    /** Called with the place in the queue on each WAITING reply. */
    onWaiting?: (position: number) => void;
    /** Once held, the sockets and the timers do not keep the process alive. */
    unref?: boolean;
    log: Required<Logger>;
    /** The clock of the deadlines (clock.ts): it counts a suspend of the machine. */
    clock: Clock;
    /** The ACQUIRE was of version 3: frames may carry a credential, and a claim that gets one moves. */
    v3: boolean;
    /** What a resume repeats of the claim: it is under the credential (the owner is not). */
    claim: {
        name: string;
        owner: string;
        leaseMs: number;
        shared: boolean;
        limit: number;
    };
    mover: Mover;
}
/**
 * A claim. Each connection's 'data' handler is its permanent reader (a
 * promotion push is seen the moment it arrives); one timer is the claim's
 * clock: the next heartbeat on the claim's connection (at most one in
 * flight), the reply a quarter lease late, the holder's move on silence,
 * the deadline (0.8 × lease from the send of the last request the server
 * answered) and the hold limit. A blocked event loop runs no timer, so
 * `expireIfLate` lets any question about the lock read the clock itself.
 *
 * Every time kept here is a reading of `opts.clock`, which counts a suspend
 * of the machine; the timer counts the monotonic clock, which does not, and
 * after a suspend fires late: the tick reads the clock, and never takes
 * the timer's firing for the deadline.
 *
 * A claim of version 3 that the server gave a credential moves when its
 * server ended the claim's connection on purpose or went away (an ERROR of
 * a server condition, the end of the stream, silence), keeping its token
 * or its place; it never moves after a reset, and a holder never past its
 * deadline (section 14, "The client").
 */
export declare class Session {
    #private;
    private readonly opts;
    state: State;
    token: bigint;
    /** A waiter's place, when its server gave it a credential; 0 otherwise. */
    ticket: bigint;
    /** The generation of the credential. */
    generation: number;
    position: number;
    replied: boolean;
    /** Why it ended; undefined after a release. */
    error?: Error;
    /** The loss's reason, once held and lost. */
    cause?: Error;
    readonly controller: AbortController;
    readonly sched: Schedule;
    readonly name: string;
    private sentAt;
    private deadline;
    private pending;
    private nextBeat?;
    private missAt?;
    private silenceAt?;
    private holdUntil?;
    private closing;
    private timer?;
    private listeners;
    constructor(sock: Socket, raw: Socket, idx: number, acquire: Buffer, opts: SessionOptions);
    /** The address of the claim's connection (or of the last one it had). */
    get addr(): string;
    /** The index of that address in the client's list. */
    get addrIndex(): number;
    /** The TCP socket of the claim's connection (tests read its ports). */
    get raw(): Socket | undefined;
    /** Whether the claim can move: version 3, with a credential and its token or ticket. */
    get resumable(): boolean;
    /** Calls f at every change of state (held, ended). */
    onChange(f: () => void): () => void;
    /** The performance.now() from which the lock must be taken as lost: the time left now, from now. */
    validUntil(): number;
    /** Ends a held lock whose deadline has passed: the clock decides, not whether a timer has run. */
    expireIfLate(): void;
    /**
     * Ends the claim from outside: the release, or giving up the place in the
     * queue. Every connection of the claim (its own, the open attempts of a
     * move, those it has left) is closed at once, with a reset (RST, the
     * default: the TCP socket under TLS, without close_notify) or a FIN
     * (normalClose): a server that took the claim over sees the close, and
     * one that has not answered a resume yet takes nothing. Ends the client
     * did not choose close with a FIN (end).
     */
    close(): Promise<void>;
    [inspect.custom](): string;
    private notify;
    private overdue;
    /** A waiter's deadline counts only while a connection of it is counted (not while it moves). */
    private waiterDue;
    private arm;
    private tick;
    private unconfirmed;
    private end;
    /** The claim's connection is gone (closed after its server ended it): nothing confirms until an answer is adopted. */
    private dropConn;
    private onEnded;
    /** A waiter whose deadline passed moves, keeping its connection but no longer reading it. */
    private waiterMoves;
    private startMove;
    private stopMove;
    private attempt;
    /** An open attempt ended before its answer. */
    private attemptEnded;
    private onFrame;
    /** An open attempt's first frame: adopt it, ignore it, or lose the claim (section 14, "The move", step 4). */
    private answered;
    /** A frame on the claim's connection (section 7's reader, with the credentials of section 14). */
    private claimFrame;
    private reportPosition;
    private grant;
}
