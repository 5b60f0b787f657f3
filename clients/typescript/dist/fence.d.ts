/**
 * Fencing kits: make the resource a lock guards refuse a stale holder.
 *
 * Each kit keeps a high-water mark per lock name at the resource and
 * refuses a token below it in the same atomic step as the write. They take
 * a `Held` (or `fenceToken(name, token)` for a token received some other
 * way) and the user's own client for the resource, so the package gains no
 * dependency:
 *
 * - PostgreSQL: `fencePostgres(client, held)`, on a node-postgres shaped
 *   client (`query(text, values)`), as the transaction's first statement.
 * - Redis: `fenceRedis` and `fencedRedisSet` run the Lua scripts by
 *   EVALSHA through a function that sends one command (node-redis's
 *   `sendCommand`, ioredis's `call`).
 * - HTTP: `fenceHeaders(held)` is the `Baton-Fence` header for a service
 *   behind the Go middleware; `fencedFetch` adds it to every request.
 *
 * Files have no kit here: Node.js has no flock(2); use the Go or Python
 * client's (the same sidecar format), or fence the write elsewhere.
 *
 * Call the kit at the first access after the grant, reads included, so a
 * stale holder that read before the newer one and writes after it is
 * refused. A stale token rejects with `StaleToken`; a shared claim with a
 * limit above 1 with `SharedClaim` (docs/fencing.md, per-record pattern).
 */
/** What a kit needs of a lock: `Held` is one. */
export interface Fenceable {
    readonly name: string;
    readonly token: bigint;
    readonly shared?: boolean;
    readonly limit?: number;
}
/** A lock's name and a token received some other way (`BATON_TOKEN`). */
export declare function fenceToken(name: string, token: bigint | string): Fenceable;
/** fence/postgres/baton_fence.sql. */
export declare const POSTGRES_SQL: string;
/** fence/redis/fence.lua. */
export declare const REDIS_FENCE_LUA: string;
/** fence/redis/fenced_set.lua. */
export declare const REDIS_FENCED_SET_LUA: string;
/** What node-postgres's Client and PoolClient are, for the kit. */
export interface PgQueryable {
    query(text: string, values?: unknown[]): Promise<unknown>;
}
/**
 * Fences a PostgreSQL transaction: await it on the transaction's client as
 * its first statement, before it reads what it will write. It calls
 * `baton_fence`, which records the token as the lock's mark or raises; a
 * stale token rejects with `StaleToken` (its cause the driver's error), and
 * the transaction, aborted, must be rolled back. The mark's row stays
 * locked until the transaction ends. The token goes as text cast to
 * numeric: it passes bigint.
 */
export declare function fencePostgres(client: PgQueryable, held: Fenceable): Promise<void>;
/** Loads baton_fence.sql (the table of marks and the function); it keeps every mark that exists. */
export declare function installPostgres(client: PgQueryable): Promise<void>;
/**
 * Sends one Redis command and resolves to its reply, rejecting on an error
 * reply with an error whose message is the reply's text:
 * `(args) => client.sendCommand(args)` with node-redis,
 * `(args) => redis.call(args[0], ...args.slice(1))` with ioredis.
 */
export type RedisSend = (args: string[]) => Promise<unknown>;
/**
 * Checks and records the token in the mark at `markKey`
 * (fence/redis/fence.lua) by EVALSHA, with EVAL when the server lacks the
 * script. A stale token rejects with `StaleToken`. Await it at the grant,
 * before reading what will be written; write with `fencedRedisSet`.
 */
export declare function fenceRedis(send: RedisSend, markKey: string, held: Fenceable): Promise<void>;
/**
 * Sets `key` to `value` if the token is at least the mark at `markKey`,
 * recording it, in one step (fence/redis/fenced_set.lua); a stale token
 * writes nothing and rejects with `StaleToken`. In Redis Cluster both keys
 * need one hash slot (`{jobs}:mark`, `{jobs}:data`).
 */
export declare function fencedRedisSet(send: RedisSend, markKey: string, held: Fenceable, key: string, value: string): Promise<void>;
/** The header that carries a lock's token to a service behind the Go middleware. */
export declare const FENCE_HEADER = "Baton-Fence";
/**
 * `{"Baton-Fence": "<name>=<token>"}`: the name percent-encoded, the token
 * in decimal. Send it on every request made under the lock, reads included:
 * `fetch(url, { method: "PUT", body, headers: fenceHeaders(held) })`.
 */
export declare function fenceHeaders(held: Fenceable): Record<string, string>;
/**
 * A fetch that adds the Baton-Fence header to every request. A stale token
 * is answered 409 Conflict with a JSON body that says why.
 */
export declare function fencedFetch(held: Fenceable, fetchImpl?: typeof fetch): typeof fetch;
