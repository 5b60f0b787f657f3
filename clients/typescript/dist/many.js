"use strict";
/**
 * Several names held together: all or none, in one order, so two
 * processes that want overlapping sets can never each hold a part and wait
 * for the other's.
 */
Object.defineProperty(exports, "__esModule", { value: true });
exports.HeldMany = void 0;
exports.order = order;
exports.acquireAll = acquireAll;
const errors_js_1 = require("./errors.js");
/** Every name of an acquireMany, held together. */
class HeldMany {
    locks;
    /** The names, in the order they were acquired (sorted). */
    names;
    /** Each name's fencing token: pass them all to the guarded resources. */
    tokens;
    /** Aborted when any one of the names is lost (its reason is that name's LockLost). */
    signal;
    /** @internal */
    constructor(locks) {
        this.locks = locks;
        this.names = locks.map((h) => h.name);
        this.tokens = new Map(locks.map((h) => [h.name, h.token]));
        this.signal = AbortSignal.any(locks.map((h) => h.signal));
    }
    /** True once any name is lost; reads the clock, as Held.lost does. */
    get lost() {
        return this.locks.some((h) => h.lost);
    }
    /** The earliest validUntil of the names. */
    get validUntil() {
        return Math.min(...this.locks.map((h) => h.validUntil));
    }
    /** Throws the LockLost of the first name lost, by the clock as Held.check() does. */
    check() {
        for (const h of this.locks)
            h.check();
    }
    /** Releases every name; rejects with the first LockLost if any was lost. */
    async release() {
        let first;
        for (const h of [...this.locks].reverse()) {
            try {
                await h.release();
            }
            catch (e) {
                if (!(e instanceof errors_js_1.LockLost))
                    throw e;
                first ??= e;
            }
        }
        if (first)
            throw first;
    }
    async [Symbol.asyncDispose]() {
        await this.release();
    }
}
exports.HeldMany = HeldMany;
/** The names of an acquireMany, in the one order every caller uses. */
function order(names) {
    if (typeof names === "string" || !Array.isArray(names))
        throw new errors_js_1.BadRequestError("acquireMany takes an array of names");
    const sorted = [...new Set(names)].sort();
    if (sorted.length === 0)
        throw new errors_js_1.BadRequestError("acquireMany needs at least one name");
    return sorted;
}
/** Acquires each name in order; on any failure releases those it holds and rethrows. */
async function acquireAll(names, acquire) {
    const held = [];
    try {
        for (const name of order(names))
            held.push(await acquire(name));
    }
    catch (e) {
        for (const h of held.reverse())
            await h.release().catch(() => { }); // the failure being thrown says more
        throw e;
    }
    return new HeldMany(held);
}
