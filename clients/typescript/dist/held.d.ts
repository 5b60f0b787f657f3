/** A lock held by this process. */
import { inspect, type InspectOptions } from "node:util";
import type { Session } from "./session.js";
import type { Claim } from "./wire.js";
/**
 * A lock held by this process: the claim is its connection.
 *
 * Ask `check()` (or `lost`) right before each step that touches the guarded
 * resource: both read the clock themselves, so a process that wakes past
 * the deadline (a blocked event loop, a GC pause, SIGSTOP, a suspend of the
 * machine) is told at once.
 * `signal` is aborted by the client's timers and socket events, which a
 * blocked loop runs late: pass it to fetch, streams and timers so they stop,
 * but do not take its silence for ownership.
 *
 * When the server side ends the claim's connection (a restart, a change of
 * leader, a crash), the client carries the claim to the next server within
 * its deadline (protocol version 3): the lock stays held with the same
 * token, `signal` is not aborted and `check()` does not throw; only a claim
 * that cannot move in time is lost. The claim's credential, which lets a
 * connection take the claim over, is never printed, inspected or serialised.
 */
export declare class Held {
    protected readonly session: Session;
    /** The lock's name. */
    readonly name: string;
    /** The fencing token of this grant: pass it to the guarded resource. A bigint; print it with `String(token)`. */
    readonly token: bigint;
    /** Aborted when the client sees the loss (its reason is a LockLost); never by release. */
    readonly signal: AbortSignal;
    /** A shared claim (a semaphore's slot, a reader), held together with other shared claims; false for an exclusive one, which holds alone. */
    readonly shared: boolean;
    /** How many claims may hold the name together with this one, this one included: the shared claim's limit, 1 for an exclusive one. */
    readonly limit: number;
    /** @internal */
    constructor(session: Session, claim?: Claim);
    /**
     * The lock as JSON (JSON.stringify cannot write a bigint): the token as a
     * decimal string, which every JSON reader keeps exactly.
     */
    toJSON(): {
        name: string;
        token: string;
        shared: boolean;
        limit: number;
    };
    /** What util.inspect and console.log show: the lock, never its connections or credential. */
    [inspect.custom](_depth: number, options: InspectOptions): string;
    /** True once ownership has ended by a loss; reads the clock, as check() does. */
    get lost(): boolean;
    /**
     * The `performance.now()` from which the lock must be taken as lost even if
     * no reply has said so: the send time of the latest request the server
     * confirmed plus 0.8 × lease (or the maxHoldMs limit if that comes first).
     * It moves on with every confirmed heartbeat, and, after a move to another
     * server, from the send of the resume that server answered.
     *
     * The deadline is measured on a clock that counts a suspend of the
     * machine, which `performance.now()` does not: this is the time left when
     * asked, from `performance.now()` then. Ask again for each step: after a
     * suspend, an answer given before it is late by the suspend's length
     * (`check()` is right at once).
     */
    get validUntil(): number;
    /**
     * Throws the LockLost once ownership has ended. Past validUntil it ends the
     * claim and throws, even if no timer of the client has run since.
     */
    check(): void;
    /**
     * Closes the session: the release; the next waiter is promoted at once.
     * Rejects with the LockLost if ownership had already ended by a loss (the
     * work that ran may not have been protected), as Go's `Release() error`
     * does; a release itself is never a loss. Idempotent.
     */
    release(): Promise<void>;
    /** `await using held = await client.acquire(name)` releases at the end of the scope (see release). */
    [Symbol.asyncDispose](): Promise<void>;
}
/**
 * What leaves a callback that failed while holding `held`: after a loss, a
 * LockLost (the callback's own error as its cause); otherwise the
 * callback's error.
 */
export declare function failure(held: {
    release(): Promise<void>;
}, err: unknown): Promise<unknown>;
