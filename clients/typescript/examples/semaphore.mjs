// A semaphore of 2 slots shared by 5 workers, against a running server:
//
//   node examples/semaphore.mjs 127.0.0.1:7070
//
// Each worker takes one slot of "example/gpu" ({ limit: 2 }) for its
// render: two render at once, the others wait in the queue, in the order
// they came, and each freed slot goes to the next at once. The workers
// share one Client, and there are more of them than slots, so they opt in
// to queueing behind each other ({ queueBehindSelf: true }), as parts of
// one process sharing a mutex do. Every grant has its own fencing token.
// (Run from clients/typescript, or with baton-client installed.)
import { Client } from "baton-client";

const addr = process.argv[2] ?? "127.0.0.1:7070";
const SLOTS = 2;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const client = new Client([addr], { leaseMs: 2000 });
let inside = 0;
let most = 0;
let rendered = 0;

async function worker(n) {
  await client.withLock("example/gpu", async (signal, slot) => {
    most = Math.max(most, ++inside);
    console.log(`worker ${n} renders in a slot of ${slot.limit} (token ${slot.token})`);
    slot.check(); // still holding, by the clock, right before the step
    await sleep(50); // the render
    inside--;
    rendered++;
  }, { limit: SLOTS, queueBehindSelf: true });
}

await Promise.all([1, 2, 3, 4, 5].map(worker));
console.log(`${rendered} renders, at most ${most} at once (the limit is ${SLOTS})`);
