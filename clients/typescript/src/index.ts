/**
 * Baton's TypeScript client for Node.js: named locks where the TCP
 * connection is the claim. Closing it is the release; heartbeats keep the
 * lock while the process lives; the client gives the lock up itself once the
 * server has confirmed nothing for 0.8 × lease; loss aborts `held.signal`.
 *
 * @example
 * const client = new Client(["127.0.0.1:7070"], { leaseMs: 10_000 });
 * await client.withLock("jobs", async (signal, held) => {
 *   await work({ signal, fence: held.token });
 * });
 */
export { Client, Held, DEFAULT_LEASE_MS, DEFAULT_DIAL_TIMEOUT_MS } from "./client.js";
export type { ClientOptions, AcquireOptions } from "./client.js";
export * from "./errors.js";
export { encodeAcquire, decode, split, HEARTBEAT } from "./wire.js";
