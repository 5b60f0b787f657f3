/**
 * Several names held together: all or none, in one order, so two
 * processes that want overlapping sets can never each hold a part and wait
 * for the other's.
 */
import type { Held } from "./held.js";
/** Every name of an acquireMany, held together. */
export declare class HeldMany {
    readonly locks: readonly Held[];
    /** The names, in the order they were acquired (sorted). */
    readonly names: readonly string[];
    /** Each name's fencing token: pass them all to the guarded resources. */
    readonly tokens: ReadonlyMap<string, bigint>;
    /** Aborted when any one of the names is lost (its reason is that name's LockLost). */
    readonly signal: AbortSignal;
    /** @internal */
    constructor(locks: readonly Held[]);
    /** True once any name is lost; reads the clock, as Held.lost does. */
    get lost(): boolean;
    /** The earliest validUntil of the names. */
    get validUntil(): number;
    /** Throws the LockLost of the first name lost, by the clock as Held.check() does. */
    check(): void;
    /** Releases every name; rejects with the first LockLost if any was lost. */
    release(): Promise<void>;
    [Symbol.asyncDispose](): Promise<void>;
}
/** The names of an acquireMany, in the one order every caller uses. */
export declare function order(names: readonly string[]): string[];
/** Acquires each name in order; on any failure releases those it holds and rethrows. */
export declare function acquireAll(names: readonly string[], acquire: (name: string) => Promise<Held>): Promise<HeldMany>;
