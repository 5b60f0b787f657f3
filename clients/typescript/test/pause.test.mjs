// A paused holder never acts on a lock it lost: the holder (test/holder.mjs,
// a child process) is stopped with SIGSTOP, or blocks its own event loop,
// past its lease; the waiter (this test) is granted; the holder's first
// held.check() after the pause must report the loss, before any timer or
// socket event of the client has run.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import * as baton from "baton-client";
import { startServer, awaitWaiters } from "./helpers.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const LEASE_MS = 2000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function holder(srv, name, mode) {
  const proc = spawn(process.execPath, [join(HERE, "holder.mjs"), srv.addr, name, String(LEASE_MS), String(LEASE_MS / 2), mode], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  const lines = [];
  let waiting;
  createInterface({ input: proc.stdout }).on("line", (l) => (waiting ? (waiting(l), (waiting = undefined)) : lines.push(l)));
  const exited = new Promise((resolve) => proc.once("exit", resolve));
  return {
    proc,
    next: () => (lines.length ? Promise.resolve(lines.shift()) : new Promise((r) => (waiting = r))),
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
      await exited;
    },
  };
}

describe("a paused holder", { skip: process.platform === "win32" && "SKIPPED: no SIGSTOP on Windows" }, () => {
  let srv;
  before(async () => { srv = await startServer(); });
  after(async () => { await srv.stop(); });

  test("SIGSTOP past the lease: the first check after SIGCONT reports the loss", async () => {
    const h = holder(srv, "ts/pause-stop", "steps");
    try {
      assert.match(await h.next(), /^held \d+$/);
      let grantedAt;
      const waiter = new baton.Client([srv.addr], { leaseMs: LEASE_MS }).acquire("ts/pause-stop", { signal: AbortSignal.timeout(30_000) })
        .then((w) => { grantedAt = performance.now(); return w; });
      await awaitWaiters(srv, "ts/pause-stop", 1);
      h.proc.kill("SIGSTOP");
      const stoppedAt = performance.now();
      const w = await waiter;
      await sleep(Math.max(0, stoppedAt + LEASE_MS - performance.now())); // stopped at least a lease, past the holder's GAP
      const resumedAt = performance.now();
      h.proc.kill("SIGCONT");
      const said = await h.next();
      console.error(`  SIGSTOP: stopped ${((resumedAt - stoppedAt) / 1000).toFixed(2)} s; waiter granted ${((grantedAt - stoppedAt) / 1000).toFixed(2)} s after the stop; the holder's first check after SIGCONT: ${JSON.stringify(said)}`);
      assert.match(said, /^after a pause/, `the holder said ${said}`);
      assert.match(said, /lost/, "the holder's first step after the pause ran on a lock the waiter held");
      await w.release();
    } finally {
      await h.stop();
    }
  });

  test("a blocked event loop: the first check after it reports the loss", async () => {
    const h = holder(srv, "ts/pause-block", "block");
    try {
      assert.match(await h.next(), /^held \d+$/);
      let grantedAt;
      const waiter = new baton.Client([srv.addr], { leaseMs: LEASE_MS }).acquire("ts/pause-block", { signal: AbortSignal.timeout(30_000) })
        .then((w) => { grantedAt = performance.now(); return w; });
      await awaitWaiters(srv, "ts/pause-block", 1);
      const blockMs = 2 * LEASE_MS;
      const blockedAt = performance.now();
      h.proc.stdin.write(`block ${blockMs}\n`);
      const said = await h.next();
      const saidAt = performance.now();
      const w = await waiter;
      console.error(`  blocked loop: ${blockMs} ms; waiter granted ${((grantedAt - blockedAt) / 1000).toFixed(2)} s after the block began; the holder's first check after it: ${JSON.stringify(said)}`);
      assert.ok(grantedAt < saidAt, "the waiter was not granted while the holder's loop was blocked");
      assert.match(said, /^after a pause of \d+ ms: lost/, "the holder's check passed after the waiter's grant");
      await w.release();
    } finally {
      await h.stop();
    }
  });
});
