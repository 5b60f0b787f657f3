/**
 * When and where a moving claim sends its next resume attempt (internal;
 * docs/protocol.md section 14, "The move", steps 1 and 3): one open attempt
 * per address; another to the next address once none has been answered
 * lease/8 after the newest one's send; the address a NOT_LEADER named, if
 * it is on the list, within a redirect budget; a jittered backoff between
 * attempts that end at once. The claim (Session) dials, sends, reads the
 * answers, and keeps the deadline.
 */
/** NOT_LEADER hints followed at once, in a row, before a move backs off (section 12). */
export declare const REDIRECT_BUDGET = 3;
/** A wait of `failures` in a row: base doubling up to cap, times 0.5-1. */
export declare function jitter(failures: number, baseMs?: number, capMs?: number): number;
/** What a move needs of its claim. */
export interface MoveHost {
    readonly leaseMs: number;
    readonly addrCount: number;
    /** A held claim with unref: the move's timers do not keep the process alive. */
    unrefTimers(): boolean;
    clock(): number;
    /** The claim's open attempts: their addresses and send times. */
    openAttempts(): Iterable<{
        idx: number;
        sentAt: number;
    }>;
    /** Whether the move may go on; the host ends the claim when a holder's deadline has passed. */
    mayGoOn(): boolean;
    /** Dials addrs[idx] and sends an attempt; then calls sent(), or dialFailed() if it could not connect. */
    attempt(move: Move, idx: number): void;
}
/** A move under way: its attempts and when the next goes. */
export declare class Move {
    #private;
    private readonly host;
    readonly from: string;
    readonly why: string;
    readonly startedAt: number;
    /** Attempts this move has sent. */
    made: number;
    /** A holder's move began on silence: the claim's connection is still the claim's. */
    silence: boolean;
    constructor(host: MoveHost, from: string, why: string, first: number, silence: boolean);
    /** Starts it: the first attempt now, or after `waitMs` (a backoff; a waiter's spread). */
    start(waitMs?: number): void;
    /** The claim's connection ended while it moved: the next attempt goes to `idx` (its hint, or its address). */
    aim(idx: number): void;
    /** No more attempts: the move is over (an attempt was adopted, the claim's connection confirmed, or the claim ended). */
    stop(): void;
    get stopped(): boolean;
    /** The attempt is sent. */
    sent(): void;
    /** The dial failed (refused, timed out): the next attempt after a backoff. */
    dialFailed(): void;
    /**
     * An open attempt ended at once (NOT_LEADER, SHUTDOWN, OVERLOADED,
     * VERSION, MOVED, the end of the stream before an answer): the next goes
     * to `hint` at once if a NOT_LEADER named an address on the list (within
     * the redirect budget), else after a backoff.
     */
    ended(hint?: number): void;
    /** Makes the next attempt if one is due. */
    pump(): void;
    private waitThen;
    private wrap;
}
