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

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { SharedClaim, StaleToken } from "./errors.js";

/** What a kit needs of a lock: `Held` is one. */
export interface Fenceable {
  readonly name: string;
  readonly token: bigint;
  readonly shared?: boolean;
  readonly limit?: number;
}

/** A lock's name and a token received some other way (`BATON_TOKEN`). */
export function fenceToken(name: string, token: bigint | string): Fenceable {
  return { name, token: BigInt(token) };
}

const MAX = 2n ** 64n - 1n;

function check(held: Fenceable): [string, bigint] {
  const { name, token } = held;
  if (held.shared && (held.limit ?? 1) > 1) {
    throw new SharedClaim(
      `fence: lock ${JSON.stringify(name)} is a shared claim with limit ${held.limit}: its holders' tokens are all current, ` +
        "and a mark per name would refuse the live ones granted earlier; fence per record with each holder's token (docs/fencing.md)");
  }
  if (typeof name !== "string" || name === "") throw new TypeError("fence: the lock name is empty");
  if (typeof token !== "bigint" || token < 1n || token > MAX) {
    throw new TypeError(`fence: lock ${JSON.stringify(name)}: token ${String(token)} is not a fencing token (a bigint from 1 to 2^64-1)`);
  }
  return [name, token];
}

function script(file: string): string {
  // dist/fence.js reads ../fence/, the copies of the repository's fence/ files.
  return readFileSync(join(__dirname, "..", "fence", file), "utf8");
}

/** fence/postgres/baton_fence.sql. */
export const POSTGRES_SQL: string = script("baton_fence.sql");
/** fence/redis/fence.lua. */
export const REDIS_FENCE_LUA: string = script("fence.lua");
/** fence/redis/fenced_set.lua. */
export const REDIS_FENCED_SET_LUA: string = script("fenced_set.lua");
const FENCE_SHA = createHash("sha1").update(REDIS_FENCE_LUA).digest("hex");
const SET_SHA = createHash("sha1").update(REDIS_FENCED_SET_LUA).digest("hex");

/** What node-postgres's Client and PoolClient are, for the kit. */
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<unknown>;
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
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
export async function fencePostgres(client: PgQueryable, held: Fenceable): Promise<void> {
  const [name, token] = check(held);
  try {
    await client.query("SELECT baton_fence($1, $2::numeric)", [name, token.toString()]);
  } catch (err) {
    if (message(err).includes("stale fencing token")) throw new StaleToken(name, token, message(err), { cause: err });
    throw err;
  }
}

/** Loads baton_fence.sql (the table of marks and the function); it keeps every mark that exists. */
export async function installPostgres(client: PgQueryable): Promise<void> {
  await client.query(POSTGRES_SQL);
}

/**
 * Sends one Redis command and resolves to its reply, rejecting on an error
 * reply with an error whose message is the reply's text:
 * `(args) => client.sendCommand(args)` with node-redis,
 * `(args) => redis.call(args[0], ...args.slice(1))` with ioredis.
 */
export type RedisSend = (args: string[]) => Promise<unknown>;

async function evalScript(send: RedisSend, name: string, token: bigint, lua: string, sha: string, keys: string[], args: string[]): Promise<void> {
  const cmd = (verb: string, body: string) => [verb, body, String(keys.length), ...keys, ...args];
  let reply: unknown;
  try {
    try {
      reply = await send(cmd("EVALSHA", sha));
    } catch (err) {
      if (!message(err).startsWith("NOSCRIPT")) throw err;
      reply = await send(cmd("EVAL", lua));
    }
  } catch (err) {
    if (message(err).startsWith("STALE")) throw new StaleToken(name, token, message(err), { cause: err });
    throw err;
  }
  if (reply !== 1 && reply !== 1n) throw new Error(`fence: lock ${JSON.stringify(name)}: redis answered ${String(reply)}, want 1`);
}

/**
 * Checks and records the token in the mark at `markKey`
 * (fence/redis/fence.lua) by EVALSHA, with EVAL when the server lacks the
 * script. A stale token rejects with `StaleToken`. Await it at the grant,
 * before reading what will be written; write with `fencedRedisSet`.
 */
export async function fenceRedis(send: RedisSend, markKey: string, held: Fenceable): Promise<void> {
  const [name, token] = check(held);
  await evalScript(send, name, token, REDIS_FENCE_LUA, FENCE_SHA, [markKey], [token.toString()]);
}

/**
 * Sets `key` to `value` if the token is at least the mark at `markKey`,
 * recording it, in one step (fence/redis/fenced_set.lua); a stale token
 * writes nothing and rejects with `StaleToken`. In Redis Cluster both keys
 * need one hash slot (`{jobs}:mark`, `{jobs}:data`).
 */
export async function fencedRedisSet(send: RedisSend, markKey: string, held: Fenceable, key: string, value: string): Promise<void> {
  const [name, token] = check(held);
  await evalScript(send, name, token, REDIS_FENCED_SET_LUA, SET_SHA, [markKey, key], [token.toString(), value]);
}

/** The header that carries a lock's token to a service behind the Go middleware. */
export const FENCE_HEADER = "Baton-Fence";

/** RFC 3986's unreserved characters and "/" stay; every other byte is %XX, as the Go and Python kits write it. */
function escapeName(name: string): string {
  return encodeURIComponent(name).replace(/%2F/g, "/").replace(/[!'()*]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());
}

/**
 * `{"Baton-Fence": "<name>=<token>"}`: the name percent-encoded, the token
 * in decimal. Send it on every request made under the lock, reads included:
 * `fetch(url, { method: "PUT", body, headers: fenceHeaders(held) })`.
 */
export function fenceHeaders(held: Fenceable): Record<string, string> {
  const [name, token] = check(held);
  return { [FENCE_HEADER]: `${escapeName(name)}=${token}` };
}

/**
 * A fetch that adds the Baton-Fence header to every request. A stale token
 * is answered 409 Conflict with a JSON body that says why.
 */
export function fencedFetch(held: Fenceable, fetchImpl: typeof fetch = fetch): typeof fetch {
  const [name, value] = Object.entries(fenceHeaders(held))[0];
  return (input, init) => {
    const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
    headers.append(name, value);
    return fetchImpl(input, { ...init, headers });
  };
}
