"use strict";
/**
 * When and where a moving claim sends its next resume attempt (internal;
 * docs/protocol.md section 14, "The move", steps 1 and 3): one open attempt
 * per address; another to the next address once none has been answered
 * lease/8 after the newest one's send; the address a NOT_LEADER named, if
 * it is on the list, within a redirect budget; a jittered backoff between
 * attempts that end at once. The claim (Session) dials, sends, reads the
 * answers, and keeps the deadline.
 */
Object.defineProperty(exports, "__esModule", { value: true });
exports.Move = exports.REDIRECT_BUDGET = void 0;
exports.jitter = jitter;
/** NOT_LEADER hints followed at once, in a row, before a move backs off (section 12). */
exports.REDIRECT_BUDGET = 3;
/** The waits between attempts that end at once: 50-100 ms doubling up to 200-400 ms (section 12). */
const BACKOFF = { baseMs: 100, capMs: 400 };
/** A wait of `failures` in a row: base doubling up to cap, times 0.5-1. */
function jitter(failures, baseMs = BACKOFF.baseMs, capMs = BACKOFF.capMs) {
    return Math.min(baseMs * 2 ** Math.min(Math.max(failures - 1, 0), 32), capMs) * (0.5 + Math.random() / 2);
}
/** A move under way: its attempts and when the next goes. */
class Move {
    host;
    from;
    why;
    startedAt;
    /** Attempts this move has sent. */
    made = 0;
    /** A holder's move began on silence: the claim's connection is still the claim's. */
    silence;
    #next;
    #failures = 0;
    #redirects = 0;
    /** A dial, or the wait before the next attempt, is under way. */
    #busy = false;
    #wait;
    #spread;
    #stopped = false;
    constructor(host, from, why, first, silence) {
        this.host = host;
        this.from = from;
        this.why = why;
        this.startedAt = host.clock();
        this.#next = this.wrap(first);
        this.silence = silence;
    }
    /** Starts it: the first attempt now, or after `waitMs` (a backoff; a waiter's spread). */
    start(waitMs = 0) {
        if (waitMs > 0)
            this.waitThen(waitMs);
        else
            this.pump();
    }
    /** The claim's connection ended while it moved: the next attempt goes to `idx` (its hint, or its address). */
    aim(idx) {
        this.#next = this.wrap(idx);
        this.silence = false;
        this.pump();
    }
    /** No more attempts: the move is over (an attempt was adopted, the claim's connection confirmed, or the claim ended). */
    stop() {
        this.#stopped = true;
        clearTimeout(this.#wait);
        clearTimeout(this.#spread);
    }
    get stopped() {
        return this.#stopped;
    }
    /** The attempt is sent. */
    sent() {
        this.#busy = false;
        this.made++;
        this.pump();
    }
    /** The dial failed (refused, timed out): the next attempt after a backoff. */
    dialFailed() {
        this.#busy = false;
        if (this.#stopped)
            return;
        this.#failures++;
        this.waitThen(jitter(this.#failures));
    }
    /**
     * An open attempt ended at once (NOT_LEADER, SHUTDOWN, OVERLOADED,
     * VERSION, MOVED, the end of the stream before an answer): the next goes
     * to `hint` at once if a NOT_LEADER named an address on the list (within
     * the redirect budget), else after a backoff.
     */
    ended(hint = -1) {
        if (this.#stopped)
            return;
        this.#failures++;
        const follow = hint >= 0 && this.#redirects < exports.REDIRECT_BUDGET;
        if (follow) {
            this.#redirects++;
            this.#next = hint;
        }
        if (this.#busy)
            return; // a dial or a wait is under way already
        if (follow)
            return this.pump();
        this.waitThen(jitter(this.#failures));
    }
    /** Makes the next attempt if one is due. */
    pump() {
        if (this.#stopped || this.#busy || !this.host.mayGoOn())
            return;
        const now = this.host.clock();
        clearTimeout(this.#spread);
        this.#spread = undefined;
        const open = new Set();
        let newest;
        for (const a of this.host.openAttempts()) {
            open.add(a.idx);
            if (newest === undefined || a.sentAt > newest)
                newest = a.sentAt;
        }
        const spread = this.host.leaseMs / 8;
        if (newest !== undefined && now < newest + spread) {
            this.#spread = setTimeout(() => this.pump(), newest + spread - now);
            if (this.host.unrefTimers())
                this.#spread.unref();
            return;
        }
        for (let k = 0; k < this.host.addrCount; k++) {
            const i = (this.#next + k) % this.host.addrCount;
            if (!open.has(i)) {
                this.#busy = true;
                this.#next = (i + 1) % this.host.addrCount;
                return this.host.attempt(this, i);
            }
        }
        // Every address has an attempt open: their answers or ends decide.
    }
    waitThen(ms) {
        this.#busy = true;
        clearTimeout(this.#wait);
        this.#wait = setTimeout(() => {
            this.#busy = false;
            this.#redirects = 0; // after a backoff, hints are followed at once again
            this.pump();
        }, ms);
        if (this.host.unrefTimers())
            this.#wait.unref();
    }
    wrap(i) {
        const n = this.host.addrCount;
        return ((i % n) + n) % n;
    }
}
exports.Move = Move;
