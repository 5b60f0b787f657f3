/** A lock held by this process. */

import { inspect, type InspectOptions } from "node:util";
import { LockLost } from "./errors.js";
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
export class Held {
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
  constructor(protected readonly session: Session, claim?: Claim) {
    this.name = session.name;
    this.token = session.token;
    this.signal = session.controller.signal;
    this.shared = claim?.shared ?? false;
    this.limit = claim?.limit ?? 1;
  }
  /**
   * The lock as JSON (JSON.stringify cannot write a bigint): the token as a
   * decimal string, which every JSON reader keeps exactly.
   */
  toJSON(): { name: string; token: string; shared: boolean; limit: number } {
    return { name: this.name, token: this.token.toString(), shared: this.shared, limit: this.limit };
  }
  /** What util.inspect and console.log show: the lock, never its connections or credential. */
  [inspect.custom](_depth: number, options: InspectOptions): string {
    const shown = Object.fromEntries(Object.entries(this).filter(([k]) => k !== "session"));
    return `${this.constructor.name} ${inspect(shown, options)}`;
  }
  /** True once ownership has ended by a loss; reads the clock, as check() does. */
  get lost(): boolean {
    this.session.expireIfLate();
    return this.signal.aborted;
  }
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
  get validUntil(): number {
    return this.session.validUntil();
  }
  /**
   * Throws the LockLost once ownership has ended. Past validUntil it ends the
   * claim and throws, even if no timer of the client has run since.
   */
  check(): void {
    this.session.expireIfLate();
    if (this.signal.aborted) throw this.signal.reason;
  }
  /**
   * Closes the session: the release; the next waiter is promoted at once.
   * Rejects with the LockLost if ownership had already ended by a loss (the
   * work that ran may not have been protected), as Go's `Release() error`
   * does; a release itself is never a loss. Idempotent.
   */
  async release(): Promise<void> {
    this.session.expireIfLate();
    await this.session.close();
    if (this.session.cause) throw this.session.error;
  }
  /** `await using held = await client.acquire(name)` releases at the end of the scope (see release). */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

/**
 * What leaves a callback that failed while holding `held`: after a loss, a
 * LockLost (the callback's own error as its cause); otherwise the
 * callback's error.
 */
export async function failure(held: { release(): Promise<void> }, err: unknown): Promise<unknown> {
  try {
    await held.release();
  } catch (loss) {
    if (!(loss instanceof LockLost)) throw loss;
    return err instanceof LockLost ? err : new LockLost(loss.lock, loss.reason, err);
  }
  return err;
}
