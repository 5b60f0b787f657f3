import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, mkdtempSync, writeFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import * as https from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as baton from "baton-client";
import * as wire from "../dist/wire.js";
import { REPO, startServer, awaitWaiters, startProxy } from "./helpers.mjs";

const vectors = JSON.parse(readFileSync(join(REPO, "clients", "go", "wire", "testdata", "vectors.json"), "utf8"));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** baton_sessions_ended_total{reason} from the server's /metrics (https with tlsOpts). */
async function ended(ops, reason, tlsOpts) {
  const text = tlsOpts
    ? await new Promise((resolve, reject) => {
        https.get(`https://${ops}/metrics`, tlsOpts, (r) => {
          let b = "";
          r.on("data", (d) => (b += d));
          r.on("end", () => resolve(b));
        }).on("error", reject);
      })
    : await (await fetch(`http://${ops}/metrics`)).text();
  const m = text.match(new RegExp(`^baton_sessions_ended_total\\{reason="${reason}"\\} (\\S+)$`, "m"));
  return m ? Number(m[1]) : 0;
}

/** The state of this host's TCP socket local -> remote port ("" if none; "06" is TIME_WAIT). */
function tcpState(local, remote) {
  for (const f of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    if (!existsSync(f)) continue;
    for (const line of readFileSync(f, "utf8").split("\n").slice(1)) {
      const x = line.trim().split(/\s+/);
      if (x.length > 3 && parseInt(x[1].split(":").pop(), 16) === local && parseInt(x[2].split(":").pop(), 16) === remote) return x[3];
    }
  }
  return "";
}

async function eventually(cond, what, ms = 5000) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`after ${ms} ms: ${what}`);
    await sleep(10);
  }
}

describe("the shared wire vectors", () => {
  test("frames both ways", () => {
    for (const f of vectors.frames) {
      const fields = f.fields;
      if (f.type === "ACQUIRE") {
        assert.equal(wire.encodeAcquire(fields.name, fields.lease_ms, fields.owner, fields.nowait).toString("hex"), f.hex, f.what);
        continue;
      }
      if (f.type === "HEARTBEAT") {
        assert.equal(wire.HEARTBEAT.toString("hex"), f.hex);
        continue;
      }
      const { frames, error } = wire.split(Buffer.from(f.hex, "hex"));
      assert.equal(error, undefined, f.what);
      assert.equal(frames.length, 1, f.what);
      const d = wire.decode(...frames[0]);
      if (f.type === "WAITING") assert.equal(d.position, fields.position, f.what);
      if (f.type === "ACQUIRED") assert.deepEqual([d.push, d.token], [fields.push, BigInt(fields.token)], f.what);
      if (f.type === "ERROR") {
        assert.deepEqual([d.code, d.message], [fields.code, fields.message], f.what);
        assert.equal(baton.codeName(d.code), fields.code_name);
      }
    }
  });
  test("refused headers", () => {
    for (const r of vectors.refused_headers) assert.ok(wire.split(Buffer.from(r.hex, "hex")).error, r.what);
  });
  test("bad ACQUIREs refused before dialling", async () => {
    for (const b of vectors.bad_acquire) {
      const name = b.name_hex ? Buffer.from(b.name_hex, "hex") : b.name;
      const owner = b.owner_hex ? Buffer.from(b.owner_hex, "hex") : b.owner;
      // Port 1: a dial would fail with ConnectionBroken instead.
      await assert.rejects(async () => {
        const c = new baton.Client(["127.0.0.1:1"], { leaseMs: b.lease_ms, owner: typeof owner === "string" ? owner : owner.toString("latin1") });
        if (typeof owner !== "string") wire.encodeAcquire(name, 1000, owner);
        await c.acquire(name);
      }, baton.BadRequestError, b.what);
    }
  });
  test("error codes and classes", () => {
    for (const c of vectors.error_codes) {
      const e = baton.errorForCode(c.code);
      assert.equal(e.code, c.code);
      assert.notEqual(e.constructor, baton.ServerError, `no class for ${c.name}`);
      assert.equal(e.serverCondition, c.class === "server");
      assert.equal(e.clientError, c.class === "client");
    }
  });
});

describe("against the real server", () => {
  let srv;
  before(async () => { srv = await startServer(); });
  after(async () => { await srv.stop(); });

  test("grant and release", async () => {
    const c = new baton.Client([srv.addr], { leaseMs: 2000 });
    const held = await c.acquire("ts/grant");
    assert.ok(held.token > 0n);
    assert.equal(held.signal.aborted, false);
    await held.release();
    const again = await c.acquire("ts/grant");
    assert.ok(again.token > held.token);
    await again.release();
    assert.equal(held.signal.aborted, false, "a release is no loss");
  });

  test("FIFO with push, within milliseconds of the release", async () => {
    const c = new baton.Client([srv.addr], { leaseMs: 2000 });
    const first = await c.acquire("ts/fifo");
    const order = [];
    let grantedAt;
    const b = c.acquire("ts/fifo", { queueBehindSelf: true }).then(async (h) => { grantedAt ??= performance.now(); order.push(["b", h.token]); await sleep(30); await h.release(); });
    await awaitWaiters(srv, "ts/fifo", 1);
    const w = c.acquire("ts/fifo", { queueBehindSelf: true }).then(async (h) => { order.push(["c", h.token]); await h.release(); });
    await awaitWaiters(srv, "ts/fifo", 2);
    const releasedAt = performance.now();
    await first.release();
    await Promise.all([b, w]);
    assert.deepEqual(order.map(([t]) => t), ["b", "c"]);
    assert.ok(order[0][1] < order[1][1]);
    const ms = grantedAt - releasedAt;
    console.error(`  handover, release to the next waiter's grant: ${ms.toFixed(2)} ms`);
    assert.ok(ms < 500, `handover took ${ms} ms`);
  });

  test("nowait: BusyError", async () => {
    const c = new baton.Client([srv.addr], { leaseMs: 2000 });
    const held = await c.acquire("ts/busy");
    await assert.rejects(c.acquire("ts/busy", { nowait: true }), (e) => e instanceof baton.BusyError && e.code === 0x13);
    await held.release();
  });

  test("a wait ends with its signal", async () => {
    const c = new baton.Client([srv.addr], { leaseMs: 2000 });
    const held = await c.acquire("ts/timeout");
    const start = performance.now();
    await assert.rejects(new baton.Client([srv.addr], { leaseMs: 2000 }).acquire("ts/timeout", { signal: AbortSignal.timeout(300) }), (e) => e.name === "TimeoutError");
    assert.ok(performance.now() - start >= 290);
    await held.release();
    const again = await c.acquire("ts/timeout", { signal: AbortSignal.timeout(5000) }); // the abandoned place is gone
    await again.release();
  });

  test("force-release is a loss, seen within 100 ms", async () => {
    const c = new baton.Client([srv.addr], { leaseMs: 10_000 });
    let seen;
    await assert.rejects(c.withLock("ts/force", async (signal) => {
      const start = performance.now();
      const lost = new Promise((r) => signal.addEventListener("abort", r, { once: true }));
      await srv.forceRelease("ts/force");
      await lost;
      seen = performance.now() - start;
    }), (e) => e instanceof baton.LockLost && e.cause instanceof baton.ForceReleasedError);
    console.error(`  force-release seen as loss after ${seen.toFixed(2)} ms`);
    assert.ok(seen < 100, `loss seen after ${seen} ms`);
  });

  test("withLock resolves with the callback's value", async () => {
    const c = new baton.Client([srv.addr], { leaseMs: 2000 });
    assert.equal(await c.withLock("ts/with", async (_signal, held) => held.token > 0n), true);
  });
});

describe("release by reset", { skip: !existsSync("/proc/net/tcp") && "SKIPPED: no /proc/net/tcp to see the client's sockets" }, () => {
  let srv;
  before(async () => { srv = await startServer(); });
  after(async () => { await srv.stop(); });

  for (const [normalClose, reason, timeWait] of [[false, "reset", false], [true, "closed", true]]) {
    test(`normalClose ${normalClose}: the server hands over on the ${reason}; ${timeWait ? "TIME_WAIT" : "no TIME_WAIT"} here`, async () => {
      const c = new baton.Client([srv.addr], { leaseMs: 2000, normalClose });
      const held = await c.acquire("ts/rst");
      const local = held.session.raw.localPort;
      const remote = held.session.raw.remotePort;
      const next = c.acquire("ts/rst", { signal: AbortSignal.timeout(10_000), queueBehindSelf: true });
      await awaitWaiters(srv, "ts/rst", 1);
      const before = await ended(srv.ops, reason);
      await held.release();
      const h2 = await next;
      assert.ok(h2.token > held.token);
      await h2.release();
      await eventually(async () => (await ended(srv.ops, reason)) >= before + 1, `the server did not count the release as ${reason}`);
      if (timeWait) {
        await eventually(() => tcpState(local, remote) === "06", `the client's socket ${local} is not in TIME_WAIT`);
      } else {
        assert.equal(tcpState(local, remote), "", `the client's socket ${local} is still there after the release`);
      }
    });
  }

  test("a wait given up resets", async () => {
    const c = new baton.Client([srv.addr], { leaseMs: 2000 });
    const held = await c.acquire("ts/rst-wait");
    const before = await ended(srv.ops, "reset");
    await assert.rejects(new baton.Client([srv.addr], { leaseMs: 2000 }).acquire("ts/rst-wait", { signal: AbortSignal.timeout(300) }), (e) => e.name === "TimeoutError");
    await eventually(async () => (await ended(srv.ops, "reset")) >= before + 1, "the server did not see the waiter's reset");
    await held.release();
  });
});

describe("server deaths, without resume (versions 1 and 2)", () => {
  // With resume (version 3, the default) a server that speaks it lets the
  // claim move instead: resume.test.mjs, and "a restart keeps the claim" below.
  test("kill -9 of the server is a loss", async () => {
    const srv = await startServer();
    const c = new baton.Client([srv.addr], { leaseMs: 10_000, resume: false });
    const held = await c.acquire("ts/kill");
    const lost = new Promise((r) => held.signal.addEventListener("abort", r, { once: true }));
    await srv.stop("SIGKILL");
    await lost;
    assert.ok(held.signal.reason instanceof baton.LockLost);
    assert.ok(held.signal.reason.cause instanceof baton.ConnectionBroken);
    await assert.rejects(held.release(), baton.LockLost, "a release after a loss reports it");
  });

  test("SHUTDOWN while waiting: requeue on the restarted server", async () => {
    let srv = await startServer();
    const c = new baton.Client([srv.addr], { leaseMs: 2000, resume: false });
    const held = await c.acquire("ts/shut");
    const waiter = new baton.Client([srv.addr], { leaseMs: 2000, resume: false }).acquire("ts/shut", { signal: AbortSignal.timeout(30_000) });
    await awaitWaiters(srv, "ts/shut", 1);
    const { addr, ops, dataDir } = srv;
    await srv.stop("SIGTERM");
    assert.ok(held.signal.aborted);
    assert.ok(held.signal.reason.cause instanceof baton.ShutdownError);
    await assert.rejects(held.release(), baton.LockLost);
    srv = await startServer({ dataDir, addr, opsAddr: ops });
    try {
      const h = await waiter;
      assert.ok(h.token > held.token, "tokens rise across the restart");
      await h.release();
    } finally {
      await srv.stop();
    }
  });
});

describe("TLS", () => {
  test("a client certificate", async () => {
    const d = mkdtempSync(join(tmpdir(), "baton-ts-tls-"));
    const ossl = (...a) => execFileSync("openssl", a, { cwd: d, stdio: "pipe" });
    writeFileSync(join(d, "ext.cnf"), "[srv]\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n[cli]\nextendedKeyUsage=clientAuth\n");
    ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=baton test CA");
    for (const [who, sec] of [["server", "srv"], ["client", "cli"]]) {
      ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", `${who}.key`, "-out", `${who}.csr`, "-subj", `/CN=${who}`);
      ossl("x509", "-req", "-in", `${who}.csr`, "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", `${who}.crt`, "-days", "2", "-extfile", "ext.cnf", "-extensions", sec);
    }
    const srv = await startServer({ extra: ["-tls-cert", join(d, "server.crt"), "-tls-key", join(d, "server.key"), "-tls-client-ca", join(d, "ca.crt")] });
    try {
      const read = (f) => readFileSync(join(d, f));
      const c = new baton.Client([srv.addr], { leaseMs: 2000, tls: { ca: read("ca.crt"), cert: read("client.crt"), key: read("client.key") } });
      await c.withLock("ts/tls", async (signal) => {
        await sleep(800); // heartbeats over TLS keep it
        assert.equal(signal.aborted, false);
      });
      // The release over TLS resets the TCP socket under it (no close_notify).
      const opsTLS = { ca: read("ca.crt"), cert: read("client.crt"), key: read("client.key") };
      await eventually(async () => (await ended(srv.ops, "reset", opsTLS)) >= 1, "the server did not see the TLS release as a reset");
      const bare = new baton.Client([srv.addr], { leaseMs: 2000, tls: { ca: read("ca.crt") } });
      await assert.rejects(bare.acquire("ts/tls", { signal: AbortSignal.timeout(5000) }), baton.UnauthorizedError);
    } finally {
      await srv.stop();
    }
  });
});

describe("through the fault proxy", () => {
  test("the heartbeat interval under 20 ms of delay each way matches the formula", async () => {
    const srv = await startServer();
    const proxy = await startProxy(srv.addr, "20ms");
    try {
      const leaseMs = 400;
      const held = await new baton.Client([proxy.addr], { leaseMs }).acquire("ts/beat");
      await sleep(2000);
      await held.release();
      await sleep(100);
      // The session's link: the one that carried heartbeats (a server of
      // version 2 answers the first link's version 3 ACQUIRE with VERSION).
      const link = proxy.chunks().find((c) => c.hex === "020000").link;
      const all = proxy.chunks().filter((c) => c.link === link);
      const up = all.filter((c) => c.dir === "up");
      const down = all.filter((c) => c.dir === "down");
      const n = Math.min(up.length, down.length);
      assert.ok(n > 8, `only ${n} round trips`);
      let srtt = 0;
      const errs = [];
      for (let i = 0; i < n; i++) {
        const rtt = (down[i].sent_ns - up[i].read_ns) / 1e6;
        srtt = i === 0 ? rtt : (4 * srtt + rtt) / 5;
        if (i + 1 < up.length && up[i + 1].hex === "020000" && i >= 3) {
          const want = Math.min(Math.max(leaseMs / 4 - 2 * srtt, 1), leaseMs / 4);
          const got = (up[i + 1].read_ns - down[i].sent_ns) / 1e6;
          errs.push(Math.abs(got - want));
        }
      }
      errs.sort((a, b) => a - b);
      const median = errs[Math.floor(errs.length / 2)];
      console.error(`  heartbeat after reply vs the formula: median error ${median.toFixed(2)} ms`);
      assert.ok(median < 10, `median error ${median} ms`);
    } finally {
      await proxy.stop();
      await srv.stop();
    }
  });

  test("a frozen link ends ownership before the server moves the lock", async () => {
    const srv = await startServer();
    const proxy = await startProxy(srv.addr);
    try {
      const leaseMs = 1000;
      // Without resume: a claim of version 3 would move around the frozen link.
      const held = await new baton.Client([proxy.addr], { leaseMs, resume: false }).acquire("ts/frozen");
      const next = new baton.Client([srv.addr], { leaseMs }).acquire("ts/frozen", { signal: AbortSignal.timeout(20_000) })
        .then(async (h) => { const at = performance.now(); await h.release(); return at; });
      await awaitWaiters(srv, "ts/frozen", 1);
      await sleep(300);
      const stalledAt = performance.now();
      const lost = new Promise((r) => held.signal.addEventListener("abort", () => r(performance.now()), { once: true }));
      await proxy.command("stall both");
      const lostAt = await lost;
      const grantedAt = await next;
      assert.ok(held.signal.reason.cause instanceof baton.Unconfirmed);
      console.error(`  frozen link: lost ${(lostAt - stalledAt).toFixed(0)} ms after the stall; next holder granted ${(grantedAt - lostAt).toFixed(0)} ms after that`);
      assert.ok(lostAt - stalledAt < 0.8 * leaseMs + 100);
      assert.ok(lostAt < grantedAt, "the old holder still believed in the lock after the next grant");
      await assert.rejects(held.release(), baton.LockLost);
    } finally {
      await proxy.stop();
      await srv.stop();
    }
  });
});

test("no server: ConnectionBroken", async () => {
  await assert.rejects(new baton.Client(["127.0.0.1:1"], { leaseMs: 1000 }).acquire("x"), baton.ConnectionBroken);
});
