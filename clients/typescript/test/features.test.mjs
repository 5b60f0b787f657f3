// The TypeScript client's helpers against the real server: re-entrancy,
// release reporting a loss, the queue position, the logger, several names
// at once, leader election, a maximum hold, withLock's causes, await using,
// and the package's two doors.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import * as baton from "baton-client";
import { startServer, awaitWaiters, startProxy } from "./helpers.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const PKG = join(HERE, "..");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const aborted = (signal) => new Promise((r) => (signal.aborted ? r() : signal.addEventListener("abort", r, { once: true })));
const lost = (held) => aborted(held.signal);

async function eventually(cond, what, ms = 5000) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`after ${ms} ms: ${what}`);
    await sleep(10);
  }
}

async function endedResets(ops) {
  const text = await (await fetch(`http://${ops}/metrics`)).text();
  const m = text.match(/^baton_sessions_ended_total\{reason="reset"\} (\S+)$/m);
  return m ? Number(m[1]) : 0;
}

describe("the client's helpers", () => {
  let srv;
  before(async () => { srv = await startServer(); });
  after(async () => { await srv.stop(); });
  const client = (opts = {}) => new baton.Client([srv.addr], { leaseMs: 2000, ...opts });

  test("re-entrancy: the same name twice is refused at once, unless queueBehindSelf", async () => {
    const c = client();
    const held = await c.acquire("ts/re");
    const start = performance.now();
    await assert.rejects(c.acquire("ts/re", { signal: AbortSignal.timeout(2000) }), baton.AlreadyHeld);
    assert.ok(performance.now() - start < 500, "refused at once, not after waiting");
    await assert.rejects(c.acquire("ts/re", { nowait: true }), baton.BusyError); // nowait cannot wait on itself
    await (await c.acquire("ts/re-other")).release(); // other names are not refused
    const behind = c.acquire("ts/re", { queueBehindSelf: true, signal: AbortSignal.timeout(10_000) });
    await awaitWaiters(srv, "ts/re", 1);
    await held.release();
    const next = await behind;
    assert.ok(next.token > held.token);
    await next.release();
    await (await c.acquire("ts/re", { signal: AbortSignal.timeout(5000) })).release(); // free again
  });

  test("re-entrancy: the name is free again after a loss", async () => {
    const c = client({ leaseMs: 10_000 });
    const held = await c.acquire("ts/re-lost");
    await srv.forceRelease("ts/re-lost");
    await lost(held);
    await (await c.acquire("ts/re-lost", { signal: AbortSignal.timeout(5000) })).release();
  });

  test("release() rejects with the LockLost after a loss, and not after a plain hold", async () => {
    const c = client({ leaseMs: 10_000 });
    const held = await c.acquire("ts/rl");
    await srv.forceRelease("ts/rl");
    await lost(held);
    await assert.rejects(held.release(), (e) => e instanceof baton.LockLost && e.reason instanceof baton.ForceReleasedError);
    await (await c.acquire("ts/rl2")).release();
  });

  test("the queue position reaches onWaiting", async () => {
    const holder = await client({ leaseMs: 400 }).acquire("ts/pos");
    const seen2 = [];
    const seen3 = [];
    const w2 = client({ leaseMs: 400 }).acquire("ts/pos", { onWaiting: (p) => seen2.push(p) });
    await awaitWaiters(srv, "ts/pos", 1);
    const w3 = client({ leaseMs: 400 }).acquire("ts/pos", { onWaiting: (p) => seen3.push(p) });
    await awaitWaiters(srv, "ts/pos", 2);
    await eventually(() => seen2.length >= 3 && seen3.length >= 3, "positions of the heartbeat replies");
    await holder.release();
    const h2 = await w2;
    await eventually(() => seen3.includes(1), "the second waiter moved up to 1");
    await h2.release();
    await (await w3).release();
    assert.deepEqual([...new Set(seen2)], [1]);
    assert.equal(seen3[0], 2);
    assert.equal(seen3.at(-1), 1);
  });

  test("the logger hears of connects, a heartbeat miss and the loss", async () => {
    const proxy = await startProxy(srv.addr);
    try {
      const lines = [];
      const logger = {
        debug: (m, f) => lines.push(["debug", m, f]),
        info: (m, f) => lines.push(["info", m, f]),
        warn: (m, f) => lines.push(["warn", m, f]),
      };
      const held = await new baton.Client([proxy.addr], { leaseMs: 1000, logger }).acquire("ts/log");
      await sleep(300);
      await proxy.command("stall both");
      await lost(held);
      const events = lines.map(([level, , f]) => `${level} ${f?.event}`);
      assert.ok(events.includes("debug connect"), events.join(", "));
      assert.ok(events.includes("warn heartbeat-miss"), events.join(", "));
      assert.ok(events.includes("warn loss"), events.join(", "));
      assert.match(lines.find(([, , f]) => f?.event === "loss")[1], /lost: no confirmation/);
      await assert.rejects(held.release(), baton.LockLost);
    } finally {
      await proxy.stop();
    }
  });

  test("a logger that throws harms nothing", async () => {
    const boom = () => { throw new Error("boom"); };
    const c = client({ logger: { debug: boom, info: boom, warn: boom } });
    await (await c.acquire("ts/log-throws")).release();
  });

  test("acquireMany: opposite orders never deadlock", async () => {
    const worker = async (names) => {
      const c = client();
      for (let i = 0; i < 30; i++) {
        await c.withLocks(names, async (_signal, many) => {
          assert.deepEqual([...many.tokens.keys()].sort(), [...names].sort());
          many.check();
        }, { signal: AbortSignal.timeout(10_000) });
      }
    };
    await Promise.all([worker(["m/a", "m/b"]), worker(["m/b", "m/a"])]);
  });

  test("acquireMany: all or nothing", async () => {
    const other = await client().acquire("m/y");
    await assert.rejects(client().acquireMany(["m/y", "m/x"], { signal: AbortSignal.timeout(300) }), (e) => e.name === "TimeoutError");
    await (await client().acquire("m/x", { nowait: true })).release(); // the name it got first was given back
    await other.release();
    await assert.rejects(client().acquireMany([]), baton.BadRequestError);
  });

  test("acquireMany: one name lost ends the whole", async () => {
    const many = await client({ leaseMs: 10_000 }).acquireMany(["m/p", "m/q"]);
    assert.deepEqual(many.names, ["m/p", "m/q"]);
    await srv.forceRelease("m/q");
    await aborted(many.signal);
    assert.equal(many.lost, true);
    assert.throws(() => many.check(), (e) => e instanceof baton.LockLost && e.lock === "m/q");
    await assert.rejects(many.release(), (e) => e instanceof baton.LockLost && e.reason instanceof baton.ForceReleasedError);
    await (await client().acquire("m/p", { nowait: true })).release(); // released with the rest
  });

  test("campaign: two candidates, the value is the owner operators see", async () => {
    const owner = async () => (await (await fetch(`http://${srv.ops}/v1/locks/${encodeURIComponent("svc/leader")}`)).json()).holder.owner;
    const a = await client().campaign("svc/leader", "node-a:8080");
    assert.equal(a.value, "node-a:8080");
    assert.equal(await owner(), "node-a:8080");
    const b = client().campaign("svc/leader", "node-b:8080");
    await awaitWaiters(srv, "svc/leader", 1);
    a.check();
    await a.resign();
    const leaderB = await b;
    assert.ok(leaderB.token > a.token);
    assert.equal(await owner(), "node-b:8080");
    await srv.forceRelease("svc/leader");
    await lost(leaderB);
    assert.throws(() => leaderB.check(), baton.LockLost); // leadership ends on loss
    await assert.rejects(leaderB.resign(), baton.LockLost);
  });

  test("the election example runs two candidates", () => {
    const out = execFileSync(process.execPath, [join(PKG, "examples", "election.mjs"), srv.addr], { cwd: PKG, encoding: "utf8", timeout: 60_000 });
    const lines = out.trim().split("\n");
    // a starts 100 ms before b, but a loaded machine may queue b first:
    // whichever leads first resigns before the other leads.
    const first = lines[0].split(" ")[0];
    const second = first === "candidate-a" ? "candidate-b" : "candidate-a";
    assert.match(lines[0], /^candidate-[ab] leads \(token \d+\)$/);
    assert.equal(lines[4], `${first} resigns`);
    assert.match(lines[5], new RegExp(`^${second} leads \\(token \\d+\\)$`));
    assert.equal(lines[9], `${second} resigns`);
  });

  test("maxHoldMs ends the claim, tells the work, and hands the lock on as a release", async () => {
    const c = client({ leaseMs: 10_000 });
    const before = await endedResets(srv.ops);
    let waiterGranted;
    const seen = await c.withLock("ts/maxhold", async (signal, held) => {
      client().acquire("ts/maxhold", { signal: AbortSignal.timeout(10_000) }).then(async (w) => { waiterGranted = performance.now(); await w.release(); });
      await awaitWaiters(srv, "ts/maxhold", 1);
      const start = performance.now();
      await aborted(signal);
      assert.throws(() => held.check(), (e) => e instanceof baton.LockLost && e.reason instanceof baton.MaxHoldReached);
      return performance.now() - start;
    }, { maxHoldMs: 500 }).then(() => assert.fail("withLock resolved after the hold ended"), (e) => {
      assert.ok(e instanceof baton.LockLost && e.reason instanceof baton.MaxHoldReached, String(e));
      return true;
    });
    assert.equal(seen, true);
    await eventually(() => waiterGranted !== undefined, "the next waiter was not granted when the hold ended");
    await eventually(async () => (await endedResets(srv.ops)) >= before + 1, "the hold's end was not a reset, as a release is");
    await assert.rejects(c.acquire("ts/x", { maxHoldMs: 0 }), baton.BadRequestError);
    await assert.rejects(c.acquire("ts/x", { maxHoldMs: Number.NaN }), baton.BadRequestError);
  });

  test("withLock: the callback's own error is the LockLost's cause", async () => {
    const c = client({ leaseMs: 10_000 });
    const own = new Error("the work's own failure");
    await assert.rejects(c.withLock("ts/cause", async (signal) => {
      await srv.forceRelease("ts/cause");
      await aborted(signal);
      throw own;
    }), (e) => e instanceof baton.LockLost && e.cause === own && e.reason instanceof baton.ForceReleasedError);
    // The LockLost itself (from check() or signal.throwIfAborted()) passes through as it is.
    let thrown;
    await assert.rejects(c.withLock("ts/cause2", async (signal, held) => {
      await srv.forceRelease("ts/cause2");
      await aborted(signal);
      try { held.check(); } catch (e) { thrown = e; throw e; }
    }), (e) => e === thrown && e.cause instanceof baton.ForceReleasedError);
    // Without a loss, the callback's error is thrown as it is.
    await assert.rejects(c.withLock("ts/cause3", () => { throw own; }), (e) => e === own);
  });

  test("Symbol.asyncDispose releases", async () => {
    const c = client();
    const held = await c.acquire("ts/dispose");
    await held[Symbol.asyncDispose]();
    await (await c.acquire("ts/dispose", { nowait: true })).release();
  });

  test("the README's example prints the token as a plain number", () => {
    const readme = readFileSync(join(PKG, "README.md"), "utf8");
    const code = readme.match(/```ts\n([\s\S]*?)```/)[1].replaceAll("127.0.0.1:7070", srv.addr);
    const dir = join(HERE, "build");
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "readme-example.mjs"), code);
    const out = execFileSync(process.execPath, [join(dir, "readme-example.mjs")], { cwd: PKG, encoding: "utf8", timeout: 30_000 });
    assert.match(out, /token \d+/, out);
    assert.doesNotMatch(out, /\d+n\b/, "a bigint printed with its n");
  });
});

describe("the package's doors", () => {
  const require = createRequire(import.meta.url);

  test("require() gets the same objects as import", () => {
    const cjs = require("baton-client");
    assert.equal(typeof cjs.Client, "function");
    assert.equal(cjs.Client, baton.Client);
    assert.equal(cjs.LockLost, baton.LockLost, "one copy of the code: instanceof holds across the doors");
    const out = execFileSync(process.execPath, ["-e", "const { Client, LockLost } = require('baton-client'); console.log(typeof Client, typeof LockLost)"], { cwd: PKG, encoding: "utf8" });
    assert.equal(out.trim(), "function function");
  });

  test("no wire internals in the public API", () => {
    for (const door of [baton, require("baton-client")]) {
      for (const name of ["encodeAcquire", "decode", "split", "HEARTBEAT", "encodeFrame", "Session", "Schedule"]) {
        assert.equal(name in door, false, `${name} is exported`);
      }
    }
    assert.throws(() => require("baton-client/dist/wire.js"), (e) => e.code === "ERR_PACKAGE_PATH_NOT_EXPORTED");
  });

  test("package.json names types for both doors", () => {
    const pkg = JSON.parse(readFileSync(join(PKG, "package.json"), "utf8"));
    const dot = pkg.exports["."];
    assert.ok(dot.import.types && dot.require.types && dot.default, JSON.stringify(dot));
  });
});
