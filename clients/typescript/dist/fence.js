"use strict";
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
Object.defineProperty(exports, "__esModule", { value: true });
exports.FENCE_HEADER = exports.REDIS_FENCED_SET_LUA = exports.REDIS_FENCE_LUA = exports.POSTGRES_SQL = void 0;
exports.fenceToken = fenceToken;
exports.fencePostgres = fencePostgres;
exports.installPostgres = installPostgres;
exports.fenceRedis = fenceRedis;
exports.fencedRedisSet = fencedRedisSet;
exports.fenceHeaders = fenceHeaders;
exports.fencedFetch = fencedFetch;
const node_crypto_1 = require("node:crypto");
const node_fs_1 = require("node:fs");
const node_path_1 = require("node:path");
const errors_js_1 = require("./errors.js");
/** A lock's name and a token received some other way (`BATON_TOKEN`). */
function fenceToken(name, token) {
    return { name, token: BigInt(token) };
}
const MAX = 2n ** 64n - 1n;
function check(held) {
    const { name, token } = held;
    if (held.shared && (held.limit ?? 1) > 1) {
        throw new errors_js_1.SharedClaim(`fence: lock ${JSON.stringify(name)} is a shared claim with limit ${held.limit}: its holders' tokens are all current, ` +
            "and a mark per name would refuse the live ones granted earlier; fence per record with each holder's token (docs/fencing.md)");
    }
    if (typeof name !== "string" || name === "")
        throw new TypeError("fence: the lock name is empty");
    if (typeof token !== "bigint" || token < 1n || token > MAX) {
        throw new TypeError(`fence: lock ${JSON.stringify(name)}: token ${String(token)} is not a fencing token (a bigint from 1 to 2^64-1)`);
    }
    return [name, token];
}
function script(file) {
    // dist/fence.js reads ../fence/, the copies of the repository's fence/ files.
    return (0, node_fs_1.readFileSync)((0, node_path_1.join)(__dirname, "..", "fence", file), "utf8");
}
/** fence/postgres/baton_fence.sql. */
exports.POSTGRES_SQL = script("baton_fence.sql");
/** fence/redis/fence.lua. */
exports.REDIS_FENCE_LUA = script("fence.lua");
/** fence/redis/fenced_set.lua. */
exports.REDIS_FENCED_SET_LUA = script("fenced_set.lua");
const FENCE_SHA = (0, node_crypto_1.createHash)("sha1").update(exports.REDIS_FENCE_LUA).digest("hex");
const SET_SHA = (0, node_crypto_1.createHash)("sha1").update(exports.REDIS_FENCED_SET_LUA).digest("hex");
function message(err) {
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
async function fencePostgres(client, held) {
    const [name, token] = check(held);
    try {
        await client.query("SELECT baton_fence($1, $2::numeric)", [name, token.toString()]);
    }
    catch (err) {
        if (message(err).includes("stale fencing token"))
            throw new errors_js_1.StaleToken(name, token, message(err), { cause: err });
        throw err;
    }
}
/** Loads baton_fence.sql (the table of marks and the function); it keeps every mark that exists. */
async function installPostgres(client) {
    await client.query(exports.POSTGRES_SQL);
}
async function evalScript(send, name, token, lua, sha, keys, args) {
    const cmd = (verb, body) => [verb, body, String(keys.length), ...keys, ...args];
    let reply;
    try {
        try {
            reply = await send(cmd("EVALSHA", sha));
        }
        catch (err) {
            if (!message(err).startsWith("NOSCRIPT"))
                throw err;
            reply = await send(cmd("EVAL", lua));
        }
    }
    catch (err) {
        if (message(err).startsWith("STALE"))
            throw new errors_js_1.StaleToken(name, token, message(err), { cause: err });
        throw err;
    }
    if (reply !== 1 && reply !== 1n)
        throw new Error(`fence: lock ${JSON.stringify(name)}: redis answered ${String(reply)}, want 1`);
}
/**
 * Checks and records the token in the mark at `markKey`
 * (fence/redis/fence.lua) by EVALSHA, with EVAL when the server lacks the
 * script. A stale token rejects with `StaleToken`. Await it at the grant,
 * before reading what will be written; write with `fencedRedisSet`.
 */
async function fenceRedis(send, markKey, held) {
    const [name, token] = check(held);
    await evalScript(send, name, token, exports.REDIS_FENCE_LUA, FENCE_SHA, [markKey], [token.toString()]);
}
/**
 * Sets `key` to `value` if the token is at least the mark at `markKey`,
 * recording it, in one step (fence/redis/fenced_set.lua); a stale token
 * writes nothing and rejects with `StaleToken`. In Redis Cluster both keys
 * need one hash slot (`{jobs}:mark`, `{jobs}:data`).
 */
async function fencedRedisSet(send, markKey, held, key, value) {
    const [name, token] = check(held);
    await evalScript(send, name, token, exports.REDIS_FENCED_SET_LUA, SET_SHA, [markKey, key], [token.toString(), value]);
}
/** The header that carries a lock's token to a service behind the Go middleware. */
exports.FENCE_HEADER = "Baton-Fence";
/** RFC 3986's unreserved characters and "/" stay; every other byte is %XX, as the Go and Python kits write it. */
function escapeName(name) {
    return encodeURIComponent(name).replace(/%2F/g, "/").replace(/[!'()*]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());
}
/**
 * `{"Baton-Fence": "<name>=<token>"}`: the name percent-encoded, the token
 * in decimal. Send it on every request made under the lock, reads included:
 * `fetch(url, { method: "PUT", body, headers: fenceHeaders(held) })`.
 */
function fenceHeaders(held) {
    const [name, token] = check(held);
    return { [exports.FENCE_HEADER]: `${escapeName(name)}=${token}` };
}
/**
 * A fetch that adds the Baton-Fence header to every request. A stale token
 * is answered 409 Conflict with a JSON body that says why.
 */
function fencedFetch(held, fetchImpl = fetch) {
    const [name, value] = Object.entries(fenceHeaders(held))[0];
    return (input, init) => {
        const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
        headers.append(name, value);
        return fetchImpl(input, { ...init, headers });
    };
}
