// Two candidates for one leadership, against a running server:
//
//   node examples/election.mjs 127.0.0.1:7070
//
// Each candidate campaigns with its own value (shown to operators as the
// lock's owner), leads for a few steps when elected, asking the clock
// before each step (leader.check()), then resigns; the other one leads at
// once. (Run from clients/typescript, or with baton-client installed.)
import { Client, LockLost } from "baton-client";

const addr = process.argv[2] ?? "127.0.0.1:7070";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function candidate(value, steps) {
  const client = new Client([addr], { leaseMs: 2000 });
  const leader = await client.campaign("example/leader", value);
  console.log(`${value} leads (token ${leader.token})`); // a bigint prints plainly in a template
  try {
    for (let step = 1; step <= steps; step++) {
      leader.check(); // still the leader, by the clock, right now
      console.log(`${value} step ${step}`);
      await sleep(50);
    }
    console.log(`${value} resigns`);
    await leader.resign();
  } catch (e) {
    if (!(e instanceof LockLost)) throw e;
    console.log(`${value} lost the leadership: ${e.reason.message}`);
  }
}

const a = candidate("candidate-a", 3);
await sleep(100); // a first, then b, in the queue
await Promise.all([a, candidate("candidate-b", 3)]);
