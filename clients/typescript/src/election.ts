/**
 * Leader election on top of the lock: the candidate that holds the name
 * leads, with its value as the owner text operators see (`baton locks`, the
 * ops API, the dashboard); the others wait in the queue, in the order they
 * came, and the next one leads the moment the leader resigns or is lost.
 */

import { Held } from "./held.js";
import type { Session } from "./session.js";

/**
 * This candidate leads while it holds the name. `check()` throws the
 * LockLost once leadership has ended (by the clock, at once); `signal` ends
 * the leader's work; `token` fences what the leader writes.
 */
export class Leadership extends Held {
  /** @internal */
  constructor(session: Session, readonly value: string) {
    super(session);
  }
  /** Gives up leadership; the next candidate leads at once. Rejects with the LockLost if it had been lost. */
  async resign(): Promise<void> {
    await this.release();
  }
}
