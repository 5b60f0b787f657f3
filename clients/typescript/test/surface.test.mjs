// The public surface a node-redlock or etcd user reaches for: a timeout
// that names its cause, unref, isRetryable, TLS errors of their own,
// waiting for a server that is not up yet, retries and backoff, the wait
// state, and observing an election (leader(), observe()).
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import * as baton from "baton-client";
import { startServer, awaitWaiters } from "./helpers.mjs";

const PKG = join(dirname(fileURLToPath(import.meta.url)), "..");

/** A listener that accepts every connection and closes it at once. */
async function breakingServer() {
  const srv = net.createServer((c) => c.destroy());
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return { addr: `127.0.0.1:${srv.address().port}`, close: () => new Promise((r) => srv.close(r)) };
}

async function freeAddr() {
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  const addr = `127.0.0.1:${srv.address().port}`;
  await new Promise((r) => srv.close(r));
  return addr;
}

describe("surface", () => {
  test("a timeout names its cause", async () => {
    const b = await breakingServer();
    try {
      const err = await new baton.Client([b.addr], { leaseMs: 2000 }).acquire("ts/cause", { signal: AbortSignal.timeout(500) }).catch((e) => e);
      assert.equal(err.name, "TimeoutError");
      assert.ok(err.cause instanceof baton.ConnectionBroken, `cause ${err.cause}, want the last attempt's ConnectionBroken`);
      assert.match(err.message, /no grant before the signal's timeout; last attempt: connection to/);
      assert.equal(baton.isRetryable(err), true);
    } finally {
      await b.close();
    }
    const srv = await startServer();
    try {
      const holder = await new baton.Client([srv.addr], { leaseMs: 2000 }).acquire("ts/cause");
      const err = await new baton.Client([srv.addr], { leaseMs: 2000 }).acquire("ts/cause", { signal: AbortSignal.timeout(500) }).catch((e) => e);
      assert.equal(err.name, "TimeoutError");
      assert.equal(err.position, 1);
      assert.match(err.message, /waiting at position 1/);
      assert.equal(err.cause?.name, "TimeoutError"); // the signal's own
      const own = new AbortController();
      setTimeout(() => own.abort(new Error("mine")), 200);
      await assert.rejects(new baton.Client([srv.addr], { leaseMs: 2000 }).acquire("ts/cause", { signal: own.signal }), /mine/); // a reason of the caller's own is kept
      await holder.release();
    } finally {
      await srv.stop();
    }
  });

  test("unref: a held lock does not keep the process alive", async () => {
    const srv = await startServer();
    try {
      const script = (unref) => `
        const baton = require(${JSON.stringify(PKG)});
        new baton.Client([${JSON.stringify(srv.addr)}], { leaseMs: 2000, unref: ${unref} }).acquire(${JSON.stringify("ts/unref-" + unref)})
          .then((h) => console.log("held", String(h.token)));`;
      const run = (unref) => {
        const p = spawn(process.execPath, ["-e", script(unref)], { stdio: ["ignore", "pipe", "inherit"] });
        let out = "";
        p.stdout.on("data", (d) => (out += d));
        const exited = new Promise((r) => p.once("exit", (code) => r(code)));
        return { p, exited, out: () => out };
      };
      const un = run(true);
      const code = await Promise.race([un.exited, new Promise((r) => setTimeout(() => r("still running"), 10_000))]);
      assert.equal(code, 0, "with unref the process did not exit by itself while holding");
      assert.match(un.out(), /^held \d+/);
      const ref = run(false);
      const still = await Promise.race([ref.exited, new Promise((r) => setTimeout(() => r("still running"), 1500))]);
      ref.p.kill();
      await ref.exited;
      assert.equal(still, "still running", "without unref (the default) a held lock keeps the process alive");
    } finally {
      await srv.stop();
    }
  });

  test("isRetryable", () => {
    for (const e of [new baton.ShutdownError(), new baton.OverloadedError(), new baton.NotLeaderError(), new baton.LeaseExpiredError(),
      new baton.Unconfirmed("x"), new baton.ConnectionBroken("x"), new baton.LockLost("a", new baton.Unconfirmed("x"))]) {
      assert.equal(baton.isRetryable(e), true, e.name);
    }
    for (const e of [new baton.BusyError(), new baton.KickedError(), new baton.ForceReleasedError(), new baton.BadRequestError(),
      new baton.UnauthorizedError(), new baton.LimitMismatchError("3"), new baton.AlreadyHeld("x"), new baton.MaxHoldReached("x"),
      new baton.TLSError("x"), new baton.LockLost("a", new baton.ForceReleasedError()), new Error("x")]) {
      assert.equal(baton.isRetryable(e), false, e.name);
    }
    assert.equal(new baton.TLSError("x") instanceof baton.ConnectionBroken, false);
  });

  test("retries and backoff", async () => {
    const b = await breakingServer();
    try {
      const start = performance.now();
      const err = await new baton.Client([b.addr], { leaseMs: 2000, backoff: { baseMs: 10, capMs: 20 }, retries: 3 })
        .acquire("ts/retries", { signal: AbortSignal.timeout(30_000) }).catch((e) => e);
      assert.ok(err instanceof baton.ConnectionBroken, `${err}`);
      assert.ok(performance.now() - start < 5000);
      assert.throws(() => new baton.Client([b.addr], { backoff: { baseMs: 0, capMs: 10 } }), baton.BadRequestError);
      assert.throws(() => new baton.Client([b.addr], { retries: -1 }), baton.BadRequestError);
    } finally {
      await b.close();
    }
  });

  test("waitForServer", async () => {
    const addr = await freeAddr();
    await assert.rejects(new baton.Client([addr]).acquire("ts/boot"), baton.ConnectionBroken); // at once: a wrong address looks the same
    const waiting = new baton.Client([addr], { waitForServer: true }).acquire("ts/boot", { signal: AbortSignal.timeout(30_000) });
    await new Promise((r) => setTimeout(r, 500));
    const srv = await startServer({ addr });
    try {
      const held = await waiting;
      assert.ok(held.token > 0n);
      await held.release();
    } finally {
      await srv.stop();
    }
    const err = await new baton.Client([await freeAddr()], { waitForServer: true }).acquire("ts/boot", { signal: AbortSignal.timeout(500) }).catch((e) => e);
    assert.equal(err.name, "TimeoutError");
    assert.ok(err.cause instanceof baton.ConnectionBroken);
  });

  test("a TLS failure is a TLSError, not retried", async () => {
    const d = mkdtempSync(join(tmpdir(), "baton-ts-tls-"));
    const ossl = (...a) => execFileSync("openssl", a, { cwd: d, stdio: "pipe" });
    writeFileSync(join(d, "ext.cnf"), "[srv]\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
    ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=baton test CA");
    ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=server");
    ossl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "ext.cnf", "-extensions", "srv");
    const srv = await startServer({ extra: ["-tls-cert", join(d, "server.crt"), "-tls-key", join(d, "server.key")] });
    try {
      const start = performance.now();
      const err = await new baton.Client([srv.addr], { tls: {}, waitForServer: true }).acquire("ts/tls", { signal: AbortSignal.timeout(10_000) }).catch((e) => e);
      assert.ok(err instanceof baton.TLSError, `${err}`);
      assert.equal(err instanceof baton.ConnectionBroken, false);
      assert.equal(baton.isRetryable(err), false);
      assert.ok(performance.now() - start < 5000, "a TLS failure was retried");
    } finally {
      await srv.stop();
    }
  });

  test("leader(), observe() and onWaitState", async () => {
    const srv = await startServer();
    try {
      const watcher = new baton.Client([srv.addr], { opsAddrs: [srv.ops] });
      assert.equal(await watcher.leader("ts/elect"), undefined);
      const a = await new baton.Client([srv.addr], { leaseMs: 2000 }).campaign("ts/elect", "node-a:8080");
      const ac = new AbortController();
      const seen = [];
      const following = (async () => {
        for await (const l of watcher.observe("ts/elect", { signal: ac.signal })) {
          seen.push(l);
          if (l.value === "node-b:8080") ac.abort();
        }
      })();
      const states = [];
      const b = new baton.Client([srv.addr], { leaseMs: 2000 }).campaign("ts/elect", "node-b:8080", { onWaitState: (s) => states.push(s) });
      await awaitWaiters(srv, "ts/elect", 1);
      await a.resign();
      const leaderB = await b;
      await following;
      assert.deepEqual(seen.map((l) => l.value), ["node-a:8080", "node-b:8080"]);
      assert.equal(seen[0].token, a.token);
      assert.equal(seen[1].token, leaderB.token);
      assert.deepEqual(await watcher.leader("ts/elect"), seen[1]);
      assert.deepEqual(states[0], { position: 1 });
      await leaderB.resign();
      await assert.rejects(new baton.Client([srv.addr]).leader("ts/elect"), baton.BadRequestError);
    } finally {
      await srv.stop();
    }
  });
});
