"use strict";
var __createBinding = (this && this.__createBinding) || (Object.create ? (function(o, m, k, k2) {
    if (k2 === undefined) k2 = k;
    var desc = Object.getOwnPropertyDescriptor(m, k);
    if (!desc || ("get" in desc ? !m.__esModule : desc.writable || desc.configurable)) {
      desc = { enumerable: true, get: function() { return m[k]; } };
    }
    Object.defineProperty(o, k2, desc);
}) : (function(o, m, k, k2) {
    if (k2 === undefined) k2 = k;
    o[k2] = m[k];
}));
var __exportStar = (this && this.__exportStar) || function(m, exports) {
    for (var p in m) if (p !== "default" && !Object.prototype.hasOwnProperty.call(exports, p)) __createBinding(exports, m, p);
};
Object.defineProperty(exports, "__esModule", { value: true });
exports.REDIS_FENCED_SET_LUA = exports.REDIS_FENCE_LUA = exports.POSTGRES_SQL = exports.FENCE_HEADER = exports.fenceToken = exports.fencedFetch = exports.fenceHeaders = exports.fencedRedisSet = exports.fenceRedis = exports.installPostgres = exports.fencePostgres = exports.Leadership = exports.HeldMany = exports.Held = exports.OpsError = exports.READER_LIMIT = exports.DEFAULT_DIAL_TIMEOUT_MS = exports.DEFAULT_LEASE_MS = exports.Client = void 0;
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
var client_js_1 = require("./client.js");
Object.defineProperty(exports, "Client", { enumerable: true, get: function () { return client_js_1.Client; } });
Object.defineProperty(exports, "DEFAULT_LEASE_MS", { enumerable: true, get: function () { return client_js_1.DEFAULT_LEASE_MS; } });
Object.defineProperty(exports, "DEFAULT_DIAL_TIMEOUT_MS", { enumerable: true, get: function () { return client_js_1.DEFAULT_DIAL_TIMEOUT_MS; } });
Object.defineProperty(exports, "READER_LIMIT", { enumerable: true, get: function () { return client_js_1.READER_LIMIT; } });
var ops_js_1 = require("./ops.js");
Object.defineProperty(exports, "OpsError", { enumerable: true, get: function () { return ops_js_1.OpsError; } });
var held_js_1 = require("./held.js");
Object.defineProperty(exports, "Held", { enumerable: true, get: function () { return held_js_1.Held; } });
var many_js_1 = require("./many.js");
Object.defineProperty(exports, "HeldMany", { enumerable: true, get: function () { return many_js_1.HeldMany; } });
var election_js_1 = require("./election.js");
Object.defineProperty(exports, "Leadership", { enumerable: true, get: function () { return election_js_1.Leadership; } });
__exportStar(require("./errors.js"), exports);
var fence_js_1 = require("./fence.js");
Object.defineProperty(exports, "fencePostgres", { enumerable: true, get: function () { return fence_js_1.fencePostgres; } });
Object.defineProperty(exports, "installPostgres", { enumerable: true, get: function () { return fence_js_1.installPostgres; } });
Object.defineProperty(exports, "fenceRedis", { enumerable: true, get: function () { return fence_js_1.fenceRedis; } });
Object.defineProperty(exports, "fencedRedisSet", { enumerable: true, get: function () { return fence_js_1.fencedRedisSet; } });
Object.defineProperty(exports, "fenceHeaders", { enumerable: true, get: function () { return fence_js_1.fenceHeaders; } });
Object.defineProperty(exports, "fencedFetch", { enumerable: true, get: function () { return fence_js_1.fencedFetch; } });
Object.defineProperty(exports, "fenceToken", { enumerable: true, get: function () { return fence_js_1.fenceToken; } });
Object.defineProperty(exports, "FENCE_HEADER", { enumerable: true, get: function () { return fence_js_1.FENCE_HEADER; } });
Object.defineProperty(exports, "POSTGRES_SQL", { enumerable: true, get: function () { return fence_js_1.POSTGRES_SQL; } });
Object.defineProperty(exports, "REDIS_FENCE_LUA", { enumerable: true, get: function () { return fence_js_1.REDIS_FENCE_LUA; } });
Object.defineProperty(exports, "REDIS_FENCED_SET_LUA", { enumerable: true, get: function () { return fence_js_1.REDIS_FENCED_SET_LUA; } });
