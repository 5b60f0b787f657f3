/**
 * Baton's TypeScript client for Node.js: named locks where the TCP
 * connection is the claim. Closing it is the release; heartbeats keep the
 * lock while the process lives; the client counts the lock as lost once the
 * server has confirmed nothing for 0.8 × lease, measured from the send of
 * the last confirmed request, and `held.check()` reads that clock itself.
 * When the server side ends a claim's connection (a restart, a change of
 * leader), the client carries the claim to the next server within that
 * deadline (protocol version 3): the lock, its token and the work go on.
 *
 * @example
 * const client = new Client(["127.0.0.1:7070"], { leaseMs: 10_000 });
 * await client.withLock("jobs", async (signal, held) => {
 *   for (const step of steps) {
 *     held.check(); // throws LockLost once the lock is lost, by the clock
 *     await step.run({ signal, fence: String(held.token) });
 *   }
 * });
 *
 * @example
 * // A semaphore: at most 4 renders at once, fleet-wide.
 * await client.withLock("render/gpu", async () => render(job), { limit: 4 });
 * // A read/write lock: readers together, a writer alone.
 * await client.withLock("config", async () => readConfig(), { shared: true });
 */
export { Client, DEFAULT_LEASE_MS, DEFAULT_DIAL_TIMEOUT_MS, READER_LIMIT } from "./client.js";
export type { ClientOptions, AcquireOptions, AcquireManyOptions, ClaimKind, WaitState } from "./client.js";
export type { Leader } from "./ops.js";
export { OpsError } from "./ops.js";
export { Held } from "./held.js";
export { HeldMany } from "./many.js";
export { Leadership } from "./election.js";
export type { Logger } from "./log.js";
export * from "./errors.js";
export {
  fencePostgres, installPostgres, fenceRedis, fencedRedisSet, fenceHeaders, fencedFetch, fenceToken,
  FENCE_HEADER, POSTGRES_SQL, REDIS_FENCE_LUA, REDIS_FENCED_SET_LUA,
} from "./fence.js";
export type { Fenceable, PgQueryable, RedisSend } from "./fence.js";
