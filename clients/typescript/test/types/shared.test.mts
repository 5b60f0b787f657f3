// Compiled by tsc (test/tsconfig.json) before it runs: the public types of
// shared claims say what the docs say.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client, LimitMismatchError, READER_LIMIT, type AcquireOptions, type AcquireManyOptions, type Held } from "baton-client";
import { startServer } from "../helpers.mjs";

test("shared claims, typed", async () => {
  const srv = await startServer();
  try {
    const client = new Client([srv.addr], { leaseMs: 2000 });
    const slot: AcquireOptions = { limit: 3 };
    // Bounded: a client that sent the reader as an exclusive claim would wait.
    const reader: AcquireOptions = { shared: true, signal: AbortSignal.timeout(10_000) };
    await using held: Held = await client.acquire("ts/typed", slot);
    const shared: boolean = held.shared;
    const limit: number = held.limit;
    assert.deepEqual([shared, limit], [true, 3]);
    try {
      await client.acquire("ts/typed", reader);
      assert.fail("a reader of a semaphore of 3 was granted");
    } catch (e) {
      if (!(e instanceof LimitMismatchError)) throw e;
      const inForce: number | undefined = e.limit;
      const asked: number | undefined = e.asked;
      assert.deepEqual([inForce, asked], [3, READER_LIMIT]);
    }
    const many: AcquireManyOptions = { perName: { "ts/r": { shared: true } }, limit: 2 };
    const set = await client.acquireMany(["ts/r", "ts/s"], many);
    assert.deepEqual(set.locks.map((h) => [h.name, h.shared, h.limit]), [["ts/r", true, READER_LIMIT], ["ts/s", true, 2]]);
    await set.release();
  } finally {
    await srv.stop();
  }
});
