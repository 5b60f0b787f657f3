// Compiled by tsc (test/tsconfig.json) before it runs, as a TypeScript
// user's code is: `await using` releases at the end of the scope, and the
// public types say what the docs say.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client, LockLost, type Held, type AcquireOptions } from "baton-client";
import { startServer } from "../helpers.mjs";

test("await using releases the lock at the end of the scope", async () => {
  const srv = await startServer();
  try {
    const client = new Client([srv.addr], { leaseMs: 2000, logger: console });
    const opts: AcquireOptions = { maxHoldMs: 60_000, onWaiting: (position: number) => void position };
    let token: bigint;
    {
      await using held: Held = await client.acquire("ts/using", opts);
      held.check();
      token = held.token;
      const until: number = held.validUntil;
      assert.ok(until > performance.now());
    }
    // Released at the end of the block: nowait gets it at once.
    await using again = await client.acquire("ts/using", { nowait: true });
    assert.ok(again.token > token);
    await srv.forceRelease("ts/using");
    await new Promise((r) => setTimeout(r, 200));
    assert.throws(() => again.check(), LockLost);
    await assert.rejects(again.release(), LockLost); // and at the end of the scope, the dispose rejects too
  } catch (e) {
    if (!(e instanceof LockLost)) throw e;
    // The scope's end released `again` after its loss: await using reports it.
  } finally {
    await srv.stop();
  }
});
