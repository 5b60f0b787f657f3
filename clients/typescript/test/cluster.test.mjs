// The client against a real cluster of three `baton serve` nodes
// (docs/operations.md, "A rolling restart or upgrade that loses no claim"):
// a holder and a waiter, with 10 s leases, through SIGTERM of the leader
// (the planned handover) and then kill -9 of the next one (a crash): the
// holder keeps its lock and its token, the server shows it resumed, and
// the waiter keeps its place and is granted after the holder's release.
import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import * as baton from "baton-client";
import * as wire from "../dist/wire.js";
import { startCluster } from "./helpers.mjs";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(cond, what, ms) {
  const deadline = performance.now() + ms;
  while (!(await cond())) {
    if (performance.now() > deadline) throw new Error(`after ${ms} ms: ${what}`);
    await sleep(20);
  }
}

/** Whether the leader at addr gives credentials yet: every voter recorded as speaking version 3, the key made. */
async function givesCredentials(addr) {
  const i = addr.lastIndexOf(":");
  const sock = net.connect({ host: addr.slice(0, i), port: Number(addr.slice(i + 1)) });
  sock.on("error", () => {});
  try {
    const frames = await new Promise((resolve) => {
      let buf = Buffer.alloc(0);
      const done = () => resolve(wire.split(buf).frames);
      sock.on("data", (d) => {
        buf = Buffer.concat([buf, d]);
        if (wire.split(buf).frames.length) done();
      });
      sock.on("close", done);
      setTimeout(done, 5000);
      sock.write(wire.encodeAcquireV3("ts/credentials-probe", 1000, "", true, { shared: false, limit: 1 }));
    });
    if (!frames.length) return false;
    const [type, p] = frames[0];
    return type === wire.T_ACQUIRED && wire.decode(type, p, true).credential !== undefined;
  } catch {
    return false;
  } finally {
    sock.destroy();
  }
}

/** The holder of name as the leader's /v1/locks shows it. */
async function holderOn(node, name) {
  const r = await fetch(`http://${node.ops}/v1/locks/${encodeURIComponent(name)}`);
  if (!r.ok) return undefined;
  return (await r.json()).holder ?? undefined;
}

test("a cluster: SIGTERM of the leader, then kill -9 of the next, keep the holder's lock and token and the waiter's place", { timeout: 180_000 }, async () => {
  const cluster = await startCluster();
  try {
    let leader = await cluster.leader();
    await until(() => givesCredentials(leader.addr), "the leader never gave a credential", 30_000);
    const moves = [];
    const logger = {
      debug() {},
      info: (m, f) => f?.event === "moved" && moves.push(f),
      warn() {},
      error() {},
    };
    const leaseMs = 10_000;
    const held = await new baton.Client(cluster.addrs, { leaseMs, logger, owner: "ts-holder" }).acquire("ts/cluster");
    let granted;
    const waiting = new baton.Client(cluster.addrs, { leaseMs, owner: "ts-waiter" })
      .acquire("ts/cluster", { signal: AbortSignal.timeout(150_000) })
      .then((h) => (granted = h));
    await until(async () => {
      const r = await fetch(`http://${leader.ops}/v1/locks/ts%2Fcluster`);
      return r.ok && (await r.json()).waiters.length === 1;
    }, "the waiter never queued", 10_000);

    // A step of a rolling restart: SIGTERM of the leader.
    const first = leader;
    assert.equal(await first.stop("SIGTERM"), 0, "the leader's exit status after SIGTERM");
    leader = await cluster.leader();
    await until(() => moves.length >= 1, "the holder did not move after SIGTERM of the leader", 0.8 * leaseMs);
    let shown;
    await until(async () => (shown = await holderOn(leader, "ts/cluster"))?.owner === "ts-holder", "the new leader does not show the holder", 5000);
    assert.equal(BigInt(shown.token_str), held.token, "the token the new leader shows");
    assert.ok(shown.resumed_from_epoch > 0, `the new leader shows no resumed_from_epoch: ${JSON.stringify(shown)}`);
    held.check();
    first.start(); // the restarted node, back before the next step
    await cluster.settled();
    await until(() => givesCredentials(leader.addr), "the new leader never gave a credential", 30_000);

    // A crash of the leader with 10 s leases: the holder comes back in
    // the next leader's grace, within its own deadline.
    const crashed = leader;
    await sleep(leaseMs / 4); // a heartbeat of the holder since the move
    await crashed.stop("SIGKILL");
    leader = await cluster.leader();
    await until(() => moves.length >= 2, "the holder did not move after kill -9 of the leader", 0.8 * leaseMs);
    await until(async () => (shown = await holderOn(leader, "ts/cluster"))?.owner === "ts-holder", "the crash successor does not show the holder", 5000);
    assert.equal(BigInt(shown.token_str), held.token, "the token after the crash");
    held.check();
    assert.equal(held.signal.aborted, false);
    assert.equal(granted, undefined, "the waiter was granted while the holder held");

    await held.release();
    const w = await waiting;
    assert.ok(w.token > held.token, `the waiter's token ${w.token} after the holder's ${held.token}`);
    await w.release();
    for (const m of moves) assert.ok(m.ms < 0.8 * leaseMs, `a move took ${m.ms} ms`);
  } finally {
    await cluster.stop();
  }
});
