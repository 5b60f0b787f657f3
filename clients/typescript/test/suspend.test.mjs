// A holder whose machine was suspended past its deadline knows the lock
// lost at its first look. suspend() suspends the machine as far as this
// process can tell: the wall clock (Date.now(), which counts a suspend)
// jumps ahead, while performance.now(), process.hrtime and every timer,
// which count the monotonic clock, do not, as across a real suspend on
// Linux. The server, another process, sees nothing: its clock went on.
import { test, describe, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import * as baton from "baton-client";
import { startServer } from "./helpers.mjs";

const LEASE_MS = 2000;
const realDateNow = Date.now;

/** From now on the machine has slept ms: Date.now() runs ms ahead. */
function suspend(ms) {
  const before = Date.now;
  Date.now = () => before() + ms;
}

async function hold(srv, name, opts = {}) {
  const c = new baton.Client([srv.addr], { leaseMs: opts.leaseMs ?? LEASE_MS });
  const held = await c.acquire(name, { signal: AbortSignal.timeout(10_000), maxHoldMs: opts.maxHoldMs });
  held.check();
  return held;
}

async function releaseQuietly(held) {
  try {
    await held.release();
  } catch (e) {
    if (!(e instanceof baton.LockLost)) throw e;
  }
}

describe("a suspended holder", () => {
  let srv;
  before(async () => { srv = await startServer(); });
  after(async () => { await srv.stop(); });
  afterEach(() => { Date.now = realDateNow; });

  test("the first check after a suspend past the deadline throws", async () => {
    const held = await hold(srv, "ts/suspend-check");
    try {
      suspend(LEASE_MS + 1000);
      const left = held.validUntil - performance.now();
      assert.ok(left < 0, `validUntil is ${left.toFixed(0)} ms ahead after a suspend of ${LEASE_MS + 1000} ms past a deadline of 0.8 × lease ${LEASE_MS} ms`);
      assert.throws(() => held.check(), (e) => e instanceof baton.LockLost && e.reason instanceof baton.Unconfirmed,
        "check() after a suspend past the deadline did not throw LockLost (Unconfirmed)");
      assert.equal(held.lost, true);
    } finally {
      await releaseQuietly(held);
    }
  });

  test("a shorter suspend takes its length off validUntil", async () => {
    const held = await hold(srv, "ts/suspend-short", { leaseMs: 10_000 });
    try {
      suspend(3000);
      const left = held.validUntil - performance.now();
      // At most 0.8 × lease from the last confirmed send, less the suspend.
      assert.ok(left <= 8000 - 3000 + 100, `time left after a suspend of 3000 ms: ${left.toFixed(0)} ms, want at most 0.8 × lease 10000 ms less 3000 ms`);
      held.check();
    } finally {
      await releaseQuietly(held);
    }
  });

  test("the maximum hold counts a suspend", async () => {
    const held = await hold(srv, "ts/suspend-max-hold", { leaseMs: 30_000, maxHoldMs: 2000 });
    try {
      suspend(3000);
      assert.throws(() => held.check(), (e) => e instanceof baton.LockLost && e.reason instanceof baton.MaxHoldReached,
        "check() after a suspend past maxHoldMs did not throw LockLost (MaxHoldReached)");
    } finally {
      await releaseQuietly(held);
    }
  });

  test("with nobody asking, the timer that stood still through the suspend ends the claim at its next run", async () => {
    const held = await hold(srv, "ts/suspend-timer");
    try {
      suspend(LEASE_MS + 1000);
      const woke = performance.now();
      while (!held.signal.aborted) { // the signal: set by the client, no clock read
        assert.ok(performance.now() - woke < LEASE_MS, `signal not aborted ${LEASE_MS} ms after a suspend of ${LEASE_MS + 1000} ms past the deadline: the session believes it holds`);
        await new Promise((r) => setTimeout(r, 10));
      }
      console.error(`  the session saw the suspend ${(performance.now() - woke).toFixed(0)} ms after the wake`);
      assert.ok(held.signal.reason instanceof baton.LockLost);
    } finally {
      await releaseQuietly(held);
    }
  });
});

describe("the clock without a suspend-counting one", () => {
  // The client's clock (dist/clock.js, internal): the monotonic clock plus
  // the wall clock's jumps ahead of it, as the Go and Python clients' fallback.
  test("counts the wall clock's jumps ahead of the monotonic clock, and nothing else", async () => {
    const { WallChecked, TOLERANCE_MS } = await import("../dist/clock.js");
    const cases = [
      ["no suspend", [[10, 10], [20, 20]], 20],
      ["suspend of 30 s", [[10, 10], [30_020, 20]], 30_020],
      ["two suspends", [[0, 0], [5020, 20], [12_030, 30]], 12_030],
      ["wall clock steps forward: counted", [[10, 10], [3_600_020, 20]], 3_600_020],
      ["wall clock steps back: not counted", [[10, 10], [-3_599_980, 20], [-3_599_970, 30]], 30],
      ["step back, then a shorter suspend", [[0, 0], [-3_599_980, 20], [-3_589_970, 30]], 10_030],
      ["jitter within the tolerance", [[0, 0], [10.9, 10], [19.5, 20], [30.9, 30]], 30],
    ];
    for (const [name, steps, want] of cases) {
      const c = new WallChecked();
      let got = 0;
      for (const [wall, mono] of steps) {
        const next = c.advance(wall, mono);
        assert.ok(next >= got, `${name}: reading went back: ${next} after ${got}`);
        got = next;
      }
      assert.equal(got, want, `${name}: reading ${got}, want ${want}`);
    }
    const c = new WallChecked();
    let got = 0;
    for (let i = 0; i < 100_000; i++) got = c.advance(i / 1000 + ((i % 7) - 3) * (TOLERANCE_MS / 8), i / 1000);
    assert.equal(got, 99.999, `after 100000 readings with jitter: ${got}, want 99.999`);
  });
});
