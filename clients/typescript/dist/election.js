"use strict";
/**
 * Leader election on top of the lock: the candidate that holds the name
 * leads, with its value as the owner text operators see (`baton locks`, the
 * ops API, the dashboard); the others wait in the queue, in the order they
 * came, and the next one leads the moment the leader resigns or is lost.
 */
Object.defineProperty(exports, "__esModule", { value: true });
exports.Leadership = void 0;
const held_js_1 = require("./held.js");
/**
 * This candidate leads while it holds the name. `check()` throws the
 * LockLost once leadership has ended (by the clock, at once); `signal` ends
 * the leader's work; `token` fences what the leader writes.
 */
class Leadership extends held_js_1.Held {
    value;
    /** @internal */
    constructor(session, value) {
        super(session);
        this.value = value;
    }
    /** Gives up leadership; the next candidate leads at once. Rejects with the LockLost if it had been lost. */
    async resign() {
        await this.release();
    }
}
exports.Leadership = Leadership;
