// The fencing kits against real servers: PostgreSQL through node-postgres
// and Redis through node-redis (devDependencies), which `go test ./clients`
// starts and names in BATON_TEST_POSTGRES_URL and BATON_TEST_REDIS, and an
// HTTP service behind the Go middleware (BATON_FENCEDCOUNTER_BIN). And
// tokens past 2^53 and 2^63 from the real server are exact in the client,
// the ops API's token_str, Held's JSON and the kits.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { createClient } from "redis";
import * as baton from "baton-client";
import { startServer } from "./helpers.mjs";
import { makeKit, parse, DATA } from "./fence-kits.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const NAME = "fenced/counter";
const missing = ["BATON_TEST_POSTGRES_URL", "BATON_TEST_REDIS", "BATON_FENCEDCOUNTER_BIN"].filter((v) => !process.env[v]);
const skip = missing.length
  ? `SKIPPED: ${missing.join(", ")} unset: run the suite through go test ./clients, which starts PostgreSQL, Redis and the fenced HTTP service`
  : false;
if (skip && process.env.CI === "true") throw new Error(skip);

const slot = { name: "pool", token: 7n, shared: true, limit: 3 }; // a semaphore's slot, as a Held of limit 3

async function pgClient() {
  const c = new pg.Client({ connectionString: process.env.BATON_TEST_POSTGRES_URL });
  await c.connect();
  return c;
}

async function resetPostgres() {
  const c = await pgClient();
  await baton.installPostgres(c);
  for (const q of ["DROP TABLE IF EXISTS counter", "DELETE FROM baton_fence_marks",
    "CREATE TABLE counter (n int NOT NULL, writer text NOT NULL)", "INSERT INTO counter VALUES (0, '')"]) await c.query(q);
  await c.end();
}

async function redisClient() {
  const r = createClient({ url: `redis://${process.env.BATON_TEST_REDIS}` });
  await r.connect();
  return r;
}

function fencedCounter() {
  const proc = spawn(process.env.BATON_FENCEDCOUNTER_BIN, [], { stdio: ["ignore", "pipe", "inherit"] });
  const exited = new Promise((r) => proc.once("exit", r));
  const url = new Promise((resolve) => createInterface({ input: proc.stdout }).once("line", (l) => resolve(l.split(" ")[1])));
  return { url, async stop() { proc.kill("SIGKILL"); await exited; } };
}

describe("fencing kits", { skip }, () => {
  test("PostgreSQL: every bit, stale tokens refused with the driver's error as cause", async () => {
    await resetPostgres();
    const c = await pgClient();
    try {
      const fenced = async (name, token) => {
        await c.query("BEGIN");
        try {
          await baton.fencePostgres(c, baton.fenceToken(name, token));
          await c.query("COMMIT");
        } catch (e) {
          await c.query("ROLLBACK");
          throw e;
        }
      };
      for (const [name, token, stale] of [["a", 2n ** 53n + 4n, false], ["a", 2n ** 53n + 5n, false], ["a", 2n ** 53n + 4n, true],
        ["top", 2n ** 64n - 2n, false], ["top", 2n ** 64n - 1n, false], ["top", 2n ** 63n + 1n, true]]) {
        if (!stale) {
          await fenced(name, token);
          continue;
        }
        await assert.rejects(fenced(name, token), (e) => e instanceof baton.StaleToken && e.token === token &&
          e.message.includes("stale fencing token") && e.cause instanceof Error);
      }
      const r = await c.query("SELECT token::text AS t FROM baton_fence_marks WHERE name = 'top'");
      assert.equal(r.rows[0].t, "18446744073709551615");
      await assert.rejects(baton.fencePostgres(c, slot), baton.SharedClaim);
      await assert.rejects(baton.fencePostgres(c, { name: "a", token: 0n }), TypeError);
    } finally {
      await c.end();
    }
  });

  test("Redis: every bit, EVALSHA with EVAL once, the fenced write", async () => {
    const r = await redisClient();
    try {
      await r.flushAll();
      await r.scriptFlush();
      const sent = [];
      const send = (args) => { sent.push(args[0]); return r.sendCommand(args); };
      for (const [token, stale] of [[2n ** 53n + 4n, false], [2n ** 53n + 5n, false], [2n ** 53n + 4n, true], [2n ** 64n - 1n, false], [2n ** 64n - 2n, true]]) {
        const p = baton.fenceRedis(send, "m", baton.fenceToken("jobs", token));
        if (stale) await assert.rejects(p, (e) => e instanceof baton.StaleToken && e.cause.message.startsWith("STALE"));
        else await p;
      }
      assert.equal(await r.get("m"), "18446744073709551615");
      assert.deepEqual(sent.slice(0, 3), ["EVALSHA", "EVAL", "EVALSHA"]);
      await baton.fencedRedisSet(send, "{s}:m", baton.fenceToken("jobs", 10n), "{s}:d", "ten");
      await assert.rejects(baton.fencedRedisSet(send, "{s}:m", baton.fenceToken("jobs", 9n), "{s}:d", "nine"), baton.StaleToken);
      assert.equal(await r.get("{s}:d"), "ten");
      await assert.rejects(baton.fenceRedis(send, "m", slot), baton.SharedClaim);
    } finally {
      r.destroy();
    }
  });

  test("HTTP: the Go middleware reads the header; a stale token is 409", async () => {
    const svc = fencedCounter();
    try {
      const url = await svc.url;
      assert.deepEqual(baton.fenceHeaders(baton.fenceToken("a=b, c/d!", 2n ** 64n - 1n)), { "Baton-Fence": "a%3Db%2C%20c/d%21=18446744073709551615" });
      const put = (tok) => baton.fencedFetch(baton.fenceToken("a=b, c/d!", tok))(url, { method: "PUT", body: "x" });
      assert.equal((await put(2n ** 64n - 1n)).status, 200);
      const stale = await put(2n ** 64n - 2n);
      assert.equal(stale.status, 409);
      const body = await stale.json();
      assert.deepEqual([body.lock, body.token], ["a=b, c/d!", "18446744073709551614"]);
      assert.throws(() => baton.fenceHeaders(slot), baton.SharedClaim);
    } finally {
      await svc.stop();
    }
  });

  // Holder A, a real process, reads the counter (0) and is stopped with
  // SIGSTOP past its lease; B, granted, reads 0 and writes 1; A is resumed
  // and writes 1. Fenced, A is refused and B's write stands; unfenced (the
  // control), A's write lands over B's: the lost update.
  describe("a stale holder", () => {
    let srv;
    before(async () => { srv = await startServer(); });
    after(async () => { await srv.stop(); });
    for (const kind of ["postgres", "redis", "http"]) {
      for (const fenced of [true, false]) {
        test(`${kind}, ${fenced ? "fenced: refused" : "unfenced: the lost update"}`, async () => {
          let where = "", svc;
          if (kind === "postgres") await resetPostgres();
          if (kind === "redis") { const r = await redisClient(); await r.flushAll(); r.destroy(); }
          if (kind === "http") { svc = fencedCounter(); where = await svc.url; }
          const a = spawn(process.execPath, [join(HERE, "fence-holder.mjs"), srv.addr, NAME, "1000", kind, fenced ? "1" : "0", where],
            { stdio: ["pipe", "pipe", "inherit"] });
          const exited = new Promise((r) => a.once("exit", r));
          const lines = createInterface({ input: a.stdout })[Symbol.asyncIterator]();
          const next = async () => (await lines.next()).value;
          try {
            assert.match(await next(), /^granted \d+$/);
            assert.equal(await next(), "holding 0");
            a.kill("SIGSTOP");
            for (const deadline = Date.now() + 15_000; ;) { // until the server has ended A's claim
              const r = await fetch(`http://${srv.ops}/v1/locks/${encodeURIComponent(NAME)}`);
              await r.body?.cancel();
              if (r.status === 404) break;
              assert.ok(Date.now() < deadline, "the stopped holder's lease did not end");
              await new Promise((r) => setTimeout(r, 20));
            }
            const kit = await makeKit(kind, fenced, where);
            const held = await new baton.Client([srv.addr], { owner: "B" }).acquire(NAME);
            try {
              assert.equal(await kit.begin(held), 0);
              await kit.write(held, 1, "B");
            } finally {
              await held.release();
              await kit.close();
            }
            a.kill("SIGCONT");
            a.stdin.write("write\n");
            const said = await next();
            const value = await valueOf(kind, where);
            if (fenced) {
              assert.match(said, /^refused /);
              assert.deepEqual(value, [1, "B"]);
            } else {
              assert.equal(said, "accepted");
              assert.deepEqual(value, [1, "A"], "unfenced: want the lost update");
            }
          } finally {
            a.kill("SIGCONT");
            a.kill("SIGKILL");
            await exited;
            await svc?.stop();
          }
        });
      }
    }
  });
});

async function valueOf(kind, where) {
  if (kind === "postgres") {
    const c = await pgClient();
    const r = await c.query("SELECT n, writer FROM counter");
    await c.end();
    return [r.rows[0].n, r.rows[0].writer];
  }
  if (kind === "redis") {
    const r = await redisClient();
    const v = await r.get(DATA);
    r.destroy();
    return parse(v);
  }
  return parse(await (await fetch(where)).text());
}

// Tokens at epoch 2^23+1 and 2^24-1: the client's bigint, the ops API's
// token_str and Held's JSON agree to the last digit; the number token,
// read by JSON.parse, does not (which is why token_str exists).
test("tokens past 2^63 keep every bit", async () => {
  for (const epoch of [2n ** 23n + 1n, 2n ** 24n - 1n]) {
    const dataDir = mkdtempSync(join(tmpdir(), "baton-ts-epoch-"));
    writeFileSync(join(dataDir, "epoch"), `${epoch - 1n}\n`);
    const srv = await startServer({ dataDir });
    try {
      const held = await new baton.Client([srv.addr]).acquire("tok");
      try {
        const want = (epoch << 40n) | 1n;
        assert.equal(held.token, want);
        const body = await (await fetch(`http://${srv.ops}/v1/locks/tok`)).json();
        assert.equal(BigInt(body.holder.token_str), want);
        assert.notEqual(BigInt(body.holder.token), want, "JSON.parse kept a token past 2^53: the test no longer shows why token_str is read");
        assert.equal(JSON.stringify(held), `{"name":"tok","token":"${want}","shared":false,"limit":1}`);
        assert.deepEqual(baton.fenceHeaders(held), { "Baton-Fence": `tok=${want}` });
      } finally {
        await held.release();
      }
    } finally {
      await srv.stop();
    }
  }
});
