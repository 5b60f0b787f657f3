// Shared claims (protocol version 2): the vectors, the claim's kind, and
// against the real server a semaphore, a read/write lock, LIMIT_MISMATCH,
// NOWAIT, several names and the example.
import { test, test as nodeTest, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import * as net from "node:net";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import * as baton from "baton-client";
import * as wire from "../dist/wire.js";
import { REPO, startServer, awaitWaiters } from "./helpers.mjs";

const PKG = join(dirname(fileURLToPath(import.meta.url)), "..");
const v2 = JSON.parse(readFileSync(join(REPO, "clients", "go", "wire", "testdata", "vectors.json"), "utf8")).version_2;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function eventually(cond, what, ms = 5000) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`after ${ms} ms: ${what}`);
    await sleep(10);
  }
}

/**
 * A scripted server on loopback: it records the first frame of each
 * connection and answers it with `answer` (an ACQUIRED reply by default).
 */
async function scriptedServer(answer = Buffer.from("820009000000000000000001", "hex")) {
  const frames = [];
  const socks = new Set();
  const srv = net.createServer((sock) => {
    socks.add(sock);
    let buf = Buffer.alloc(0);
    sock.on("error", () => {});
    sock.on("data", (d) => {
      buf = Buffer.concat([buf, d]);
      if (frames.length < socks.size && buf.length >= 3 && buf.length >= 3 + buf.readUInt16BE(1)) {
        frames.push(buf.subarray(0, 3 + buf.readUInt16BE(1)));
        sock.write(answer);
      }
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return {
    addr: `127.0.0.1:${srv.address().port}`,
    frames,
    accepted: () => socks.size,
    async close() {
      for (const s of socks) s.destroy();
      await new Promise((r) => srv.close(r));
    },
  };
}

describe("the version 2 vectors", () => {
  test("frames both ways", () => {
    const types = new Set();
    for (const f of v2.frames) {
      const x = f.fields;
      types.add(f.type);
      if (f.type === "ACQUIRE") {
        assert.equal(wire.encodeAcquire(x.name, x.lease_ms, x.owner, x.nowait, { shared: x.shared, limit: x.limit }).toString("hex"), f.hex, f.what);
        continue;
      }
      assert.equal(f.type, "ERROR", `a version 2 vector this test does not know: ${f.what}`);
      const { frames, error } = wire.split(Buffer.from(f.hex, "hex"));
      assert.equal(error, undefined);
      const d = wire.decode(...frames[0]);
      assert.deepEqual([d.code, d.message], [x.code, x.message]);
      const e = baton.errorForCode(d.code, d.message);
      assert.ok(e instanceof baton.LimitMismatchError, f.what);
      assert.equal(baton.codeName(e.code), x.code_name);
      assert.equal(e.limit, Number(x.message));
      assert.equal(e.clientError, true);
    }
    assert.deepEqual([...types].sort(), ["ACQUIRE", "ERROR"]);
  });

  test("a client's claims without resume send them; an exclusive claim stays version 1", async () => {
    for (const f of v2.frames.filter((f) => f.type === "ACQUIRE")) {
      const x = f.fields;
      const srv = await scriptedServer();
      try {
        const c = new baton.Client([srv.addr], { leaseMs: x.lease_ms, owner: x.owner, resume: false });
        const held = await c.acquire(x.name, x.shared ? { nowait: x.nowait, limit: x.limit } : { nowait: x.nowait });
        const want = x.shared ? f.hex : wire.encodeAcquire(x.name, x.lease_ms, x.owner, x.nowait).toString("hex");
        assert.equal(srv.frames[0].toString("hex"), want, f.what);
        assert.deepEqual([held.shared, held.limit], x.shared ? [true, x.limit] : [false, 1], f.what);
        // A vector's lease may be 1 ms: on a loaded machine the claim can be
        // lost before its release, which is not what this test is about.
        await held.release().catch((e) => assert.ok(e instanceof baton.LockLost, String(e)));
      } finally {
        await srv.close();
      }
    }
  });

  test("bad ACQUIREs refused before dialling", async () => {
    for (const b of v2.bad_acquire) {
      assert.throws(() => wire.encodeAcquire(b.name, b.lease_ms, b.owner, false, { shared: b.shared, limit: b.limit }), baton.BadRequestError, b.what);
      if (!b.shared) continue; // no option sends an exclusive claim a limit
      // Port 1: a dial would fail with ConnectionBroken instead.
      const c = new baton.Client(["127.0.0.1:1"], { leaseMs: b.lease_ms, owner: b.owner });
      await assert.rejects(c.acquire(b.name, { limit: b.limit }), baton.BadRequestError, b.what);
    }
  });

  test("error codes", () => {
    for (const c of v2.error_codes) {
      const e = baton.errorForCode(c.code);
      assert.equal(e.code, c.code);
      assert.notEqual(e.constructor, baton.ServerError, `no class for ${c.name}`);
      assert.equal(e.clientError, c.class === "client");
    }
  });
});

describe("the claim's kind", () => {
  test("from the options", async () => {
    const srv = await scriptedServer();
    try {
      const c = new baton.Client([srv.addr], { owner: "" });
      const cases = [
        [{}, false, 1],
        [{ limit: 3 }, true, 3],
        [{ shared: true }, true, baton.READER_LIMIT],
        [{ shared: true, limit: 4 }, true, 4],
        [{ limit: 1 }, true, 1],
      ];
      for (const [i, [opts, shared, limit]] of cases.entries()) {
        const held = await c.acquire(`k${i}`, opts);
        const f = srv.frames[i];
        // Version 3 (resume, the default) has the layout of version 2.
        assert.equal(f[3], wire.VERSION_3, JSON.stringify(opts));
        assert.deepEqual([f[4] & wire.FLAG_SHARED, f.readUInt16BE(9)], [shared ? wire.FLAG_SHARED : 0, limit], JSON.stringify(opts));
        assert.deepEqual([held.shared, held.limit], [shared, limit], JSON.stringify(opts));
        await held.release();
      }
    } finally {
      await srv.close();
    }
  });

  test("refused before dialling", async () => {
    const c = new baton.Client(["127.0.0.1:1"]);
    for (const opts of [{ limit: 0 }, { limit: -1 }, { limit: 65536 }, { limit: 2.5 }, { limit: NaN }, { limit: "3" }, { shared: "yes" }]) {
      await assert.rejects(c.acquire("jobs", opts), baton.BadRequestError, JSON.stringify(opts));
      await assert.rejects(c.acquireMany(["a", "b"], opts), baton.BadRequestError, JSON.stringify(opts));
    }
    await assert.rejects(c.acquireMany(["data", "config"], { perName: { confg: { shared: true } } }), /perName names "confg"/);
    await assert.rejects(c.acquireMany(["data", "config"], { perName: { config: { shard: true } } }), baton.BadRequestError);
  });

  test("LimitMismatchError says the limit in force, and the one asked", () => {
    const e = new baton.LimitMismatchError("3", 5);
    assert.deepEqual([e.limit, e.asked, e.code, e.serverMessage], [3, 5, 0x24, "3"]);
    assert.equal(e.message, "LIMIT_MISMATCH: the name's limit in force is 3, this claim's is 5");
    const odd = baton.errorForCode(0x24, "three");
    assert.equal(odd.limit, undefined);
    assert.equal(odd.message, "LIMIT_MISMATCH: three");
  });

  test("LIMIT_MISMATCH is not retried", async () => {
    const srv = await scriptedServer(Buffer.from("8000022433", "hex"));
    try {
      const c = new baton.Client([srv.addr]);
      await assert.rejects(c.acquire("jobs", { limit: 5, signal: AbortSignal.timeout(30_000) }), (e) => e instanceof baton.LimitMismatchError && e.limit === 3 && e.asked === 5);
      await sleep(300); // a retry would come within a backoff
      assert.equal(srv.accepted(), 1, "one connection: not retried");
    } finally {
      await srv.close();
    }
  });
});

describe("shared claims against the real server", () => {
  // A client that gets a claim wrong can wait forever: each test fails
  // instead, and the waits it leaves behind are given up when the suite
  // ends (an acquire of these clients without a signal of its own takes
  // the suite's), so that the run exits. (Not AbortSignal.any: in Node 20 a
  // timeout signal inside it can be collected and never fire.)
  const test = (name, fn) => nodeTest(name, { timeout: 60_000 }, fn);
  const suiteEnd = new AbortController();
  class SuiteClient extends baton.Client {
    acquire(name, opts = {}) {
      return super.acquire(name, { ...opts, signal: opts.signal ?? suiteEnd.signal });
    }
  }
  let srv;
  before(async () => {
    srv = await startServer();
  });
  after(async () => {
    suiteEnd.abort(new Error("the suite ended"));
    await srv.stop();
  });
  const client = (opts = {}) => new SuiteClient([srv.addr], { leaseMs: 2000, ...opts });
  const view = async (name) => {
    const r = await fetch(`http://${srv.ops}/v1/locks/${encodeURIComponent(name)}`);
    return r.status === 404 ? { holders: [], waiters: [], limit: null } : r.json();
  };
  const endedBy = async (reason) => {
    const text = await (await fetch(`http://${srv.ops}/metrics`)).text();
    const m = text.match(new RegExp(`^baton_sessions_ended_total\\{reason="${reason}"\\} (\\S+)$`, "m"));
    return m ? Number(m[1]) : 0;
  };
  /** Starts an acquire and resolves once the server has it queued; `.state` says how it went. */
  const later = async (c, name, opts = {}) => {
    const before = (await view(name)).waiters.length;
    const out = { state: "waiting" };
    out.done = c.acquire(name, { signal: AbortSignal.timeout(30_000), ...opts }).then(
      (h) => Object.assign(out, { state: "held", held: h }),
      (e) => Object.assign(out, { state: "failed", error: e }),
    );
    await awaitWaiters(srv, name, before + 1);
    return out;
  };
  const granted = async (out, what) => {
    await Promise.race([out.done, sleep(10_000)]);
    assert.equal(out.state, "held", `${what}: ${out.error ?? "not granted within 10 s"}`);
    return out.held;
  };

  test("a semaphore of 3, five contenders: three at once, the others in order", async () => {
    const name = "ts/sem3";
    const cl = [0, 1, 2, 3, 4].map((i) => client({ owner: `c${i}` }));
    const held = [];
    for (const i of [0, 1, 2]) held.push(await cl[i].acquire(name, { limit: 3 }));
    for (const h of held) assert.deepEqual([h.shared, h.limit], [true, 3]);
    const w3 = await later(cl[3], name, { limit: 3 });
    const w4 = await later(cl[4], name, { limit: 3 });
    let v = await view(name);
    assert.deepEqual([v.holders.length, v.limit, v.waiters.map((w) => w.owner)], [3, 3, ["c3", "c4"]]);
    await held[1].release();
    held.push(await granted(w3, "the fourth, after a slot was freed"));
    v = await view(name);
    assert.deepEqual([v.holders.length, v.waiters.map((w) => w.owner)], [3, ["c4"]]);
    assert.equal(w4.state, "waiting", "the fifth, behind the fourth");
    await held[0].release();
    held.push(await granted(w4, "the fifth"));
    const tokens = held.map((h) => h.token);
    assert.deepEqual(tokens, [...tokens].sort((a, b) => (a < b ? -1 : 1)), "grants out of queue order");
    assert.equal(new Set(tokens).size, 5);
    for (const h of held.slice(2)) await h.release();
  });

  test("never more than the limit inside, everyone gets in", async () => {
    const name = "ts/churn";
    const rounds = 6;
    let inside = 0;
    let most = 0;
    let grants = 0;
    await Promise.all([0, 1, 2, 3, 4].map(async (i) => {
      const c = client({ owner: `c${i}` });
      for (let r = 0; r < rounds; r++) {
        await c.withLock(name, async (signal, slot) => {
          most = Math.max(most, ++inside);
          grants++;
          await sleep(2);
          slot.check();
          inside--;
        }, { limit: 3, signal: AbortSignal.timeout(30_000) });
      }
    }));
    assert.ok(most <= 3, `${most} inside at once, want at most 3`);
    assert.equal(grants, 5 * rounds);
  });

  test("NOWAIT on a full semaphore is BusyError", async () => {
    const name = "ts/nowait";
    const a = await client().acquire(name, { limit: 2 });
    const b = await client().acquire(name, { limit: 2, nowait: true }); // a slot is free
    await assert.rejects(client().acquire(name, { limit: 2, nowait: true }),
      (e) => e instanceof baton.BusyError && e.serverMessage === `lock "${name}" has no free slot: 2 of 2 held`);
    await a.release();
    await b.release();
  });

  test("LIMIT_MISMATCH at once, not retried; a new limit once the name's shared sessions end", async () => {
    const name = "ts/mismatch";
    const holder = await client().acquire(name, { limit: 3 });
    for (const [opts, asked] of [[{ limit: 2 }, 2], [{ limit: 2, nowait: true }, 2], [{ shared: true }, baton.READER_LIMIT]]) {
      const before = await endedBy("limit_mismatch");
      const start = Date.now();
      await assert.rejects(client().acquire(name, { ...opts, signal: AbortSignal.timeout(30_000) }), (e) => {
        assert.ok(e instanceof baton.LimitMismatchError, String(e));
        assert.deepEqual([e.limit, e.asked, e.clientError], [3, asked, true]);
        assert.equal(e.message, `LIMIT_MISMATCH: the name's limit in force is 3, this claim's is ${asked}`);
        return true;
      });
      assert.ok(Date.now() - start < 5000, "at once");
      assert.equal((await endedBy("limit_mismatch")) - before, 1, "one session: not retried");
    }
    await holder.release();
    const slot = await client().acquire(name, { limit: 2 });
    assert.deepEqual([slot.limit, (await view(name)).limit], [2, 2]);
    await slot.release();
  });

  test("one client holds several slots, fewer than the limit", async () => {
    const name = "ts/own";
    const c = client();
    // A claim let through to the server would wait: it times out instead.
    const bounded = (opts = {}) => ({ signal: AbortSignal.timeout(10_000), ...opts });
    const one = await c.acquire(name, { limit: 2 });
    const two = await c.acquire(name, { limit: 2 });
    await assert.rejects(c.acquire(name, bounded({ limit: 2 })), baton.AlreadyHeld);
    await assert.rejects(c.acquire(name, bounded()), baton.AlreadyHeld);
    await assert.rejects(c.acquire(name, { limit: 2, nowait: true }), baton.BusyError);
    await one.release();
    await two.release();
    const excl = await c.acquire(name);
    await assert.rejects(c.acquire(name, bounded({ shared: true })), baton.AlreadyHeld);
    await excl.release();
  });

  test("a read/write lock: readers together, a writer alone, nobody overtakes", async () => {
    const name = "ts/rw";
    const r1 = await client({ owner: "r1" }).acquire(name, { shared: true });
    const r2 = await client({ owner: "r2" }).acquire(name, { shared: true });
    assert.deepEqual([r1.shared, r1.limit], [true, baton.READER_LIMIT]);
    assert.equal((await view(name)).holders.length, 2);
    const w = await later(client({ owner: "w" }), name);
    const r3 = await later(client({ owner: "r3" }), name, { shared: true });
    const r4 = await later(client({ owner: "r4" }), name, { shared: true });
    assert.equal(r3.state, "waiting", "a reader behind a waiting writer");
    await r1.release();
    await eventually(async () => (await view(name)).holders.length === 1, "the server still lists the reader that left");
    assert.equal((await view(name)).waiters[0].owner, "w");
    assert.equal(w.state, "waiting", "the writer while a reader holds");
    await r2.release();
    const writer = await granted(w, "the writer");
    assert.deepEqual([writer.shared, writer.limit], [false, 1]);
    const v = await view(name);
    assert.deepEqual([v.holders.map((h) => h.shared), v.waiters.length], [[false], 2]);
    assert.equal(r3.state, "waiting", "a reader while the writer holds");
    await writer.release();
    const h3 = await granted(r3, "the third reader");
    const h4 = await granted(r4, "the fourth reader");
    assert.equal((await view(name)).holders.length, 2);
    assert.ok(r2.token < writer.token && writer.token < h3.token && h3.token < h4.token, "tokens rise in grant order");
    await h3.release();
    await h4.release();
  });

  test("a writer is not starved by a stream of readers", async (t) => {
    const name = "ts/stream";
    let stop = false;
    let reads = 0;
    const readers = [0, 1, 2].map(async (i) => {
      const c = client({ owner: `r${i}` });
      while (!stop) {
        await c.withLock(name, async () => {
          reads++;
          await sleep(10 + 5 * i);
        }, { shared: true, signal: AbortSignal.timeout(30_000) });
      }
    });
    try {
      await eventually(() => reads >= 10, "the readers do not get going", 10_000);
      const start = performance.now();
      await client({ owner: "writer" }).withLock(name, async () => {
        const holders = (await view(name)).holders;
        assert.deepEqual(holders.map((h) => h.owner), ["writer"]);
      }, { signal: AbortSignal.timeout(10_000) });
      t.diagnostic(`the writer waited ${(performance.now() - start).toFixed(1)} ms among readers`);
    } finally {
      stop = true;
      await Promise.all(readers);
    }
  });

  test("acquireMany: a reader of one name, the writer of another", async () => {
    const c = client();
    const other = client();
    await c.withLocks(["data", "config"], async (signal, many) => {
      const cfg = await view("config");
      const data = await view("data");
      assert.deepEqual([cfg.holders.map((h) => h.shared), cfg.limit], [[true], baton.READER_LIMIT]);
      assert.deepEqual(data.holders.map((h) => h.shared), [false]);
      assert.deepEqual(many.locks.map((h) => [h.name, h.shared, h.limit]), [["config", true, baton.READER_LIMIT], ["data", false, 1]]);
      await (await other.acquire("config", { shared: true, nowait: true })).release();
      await assert.rejects(other.acquire("data", { nowait: true }), baton.BusyError);
    }, { perName: { config: { shared: true } } });
  });

  test("the semaphore example runs", () => {
    const out = execFileSync(process.execPath, [join(PKG, "examples", "semaphore.mjs"), srv.addr], { cwd: PKG, encoding: "utf8", timeout: 60_000 });
    const lines = out.trim().split("\n");
    assert.equal(lines.filter((l) => /^worker \d renders in a slot of 2 \(token \d+\)$/.test(l)).length, 5, out);
    const m = lines.at(-1).match(/^5 renders, at most (\d) at once \(the limit is 2\)$/);
    assert.ok(m && Number(m[1]) <= 2, out);
  });
});
