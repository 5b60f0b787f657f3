/**
 * Several names held together: all or none, in one order, so two
 * processes that want overlapping sets can never each hold a part and wait
 * for the other's.
 */

import { BadRequestError, LockLost } from "./errors.js";
import type { Held } from "./held.js";

/** Every name of an acquireMany, held together. */
export class HeldMany {
  /** The names, in the order they were acquired (sorted). */
  readonly names: readonly string[];
  /** Each name's fencing token: pass them all to the guarded resources. */
  readonly tokens: ReadonlyMap<string, bigint>;
  /** Aborted when any one of the names is lost (its reason is that name's LockLost). */
  readonly signal: AbortSignal;
  /** @internal */
  constructor(readonly locks: readonly Held[]) {
    this.names = locks.map((h) => h.name);
    this.tokens = new Map(locks.map((h) => [h.name, h.token]));
    this.signal = AbortSignal.any(locks.map((h) => h.signal));
  }
  /** True once any name is lost; reads the clock, as Held.lost does. */
  get lost(): boolean {
    return this.locks.some((h) => h.lost);
  }
  /** The earliest validUntil of the names. */
  get validUntil(): number {
    return Math.min(...this.locks.map((h) => h.validUntil));
  }
  /** Throws the LockLost of the first name lost, by the clock as Held.check() does. */
  check(): void {
    for (const h of this.locks) h.check();
  }
  /** Releases every name; rejects with the first LockLost if any was lost. */
  async release(): Promise<void> {
    let first: unknown;
    for (const h of [...this.locks].reverse()) {
      try {
        await h.release();
      } catch (e) {
        if (!(e instanceof LockLost)) throw e;
        first ??= e;
      }
    }
    if (first) throw first;
  }
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

/** The names of an acquireMany, in the one order every caller uses. */
export function order(names: readonly string[]): string[] {
  if (typeof names === "string" || !Array.isArray(names)) throw new BadRequestError("acquireMany takes an array of names");
  const sorted = [...new Set(names)].sort();
  if (sorted.length === 0) throw new BadRequestError("acquireMany needs at least one name");
  return sorted;
}

/** Acquires each name in order; on any failure releases those it holds and rethrows. */
export async function acquireAll(names: readonly string[], acquire: (name: string) => Promise<Held>): Promise<HeldMany> {
  const held: Held[] = [];
  try {
    for (const name of order(names)) held.push(await acquire(name));
  } catch (e) {
    for (const h of held.reverse()) await h.release().catch(() => {}); // the failure being thrown says more
    throw e;
  }
  return new HeldMany(held);
}
