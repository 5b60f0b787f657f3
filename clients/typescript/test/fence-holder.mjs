// A holder for the fencing kits' stale-holder test, run as a child
// process: it takes the lock, prints "granted TOKEN", runs the kit's begin
// (the fence's check, then the read) and prints "holding N", then waits for
// a line on stdin: "write" writes N+1 whatever the lock's state (a write
// already on its way when the lock was lost) and prints "accepted" or
// "refused ERROR".
//
// usage: node fence-holder.mjs ADDR NAME LEASE_MS KIT 0|1 WHERE
import { createInterface } from "node:readline";
import * as baton from "baton-client";
import { makeKit } from "./fence-kits.mjs";

const [addr, name, leaseMs, kind, fenced, where] = process.argv.slice(2);
const kit = await makeKit(kind, fenced === "1", where);
const held = await new baton.Client([addr], { leaseMs: Number(leaseMs), owner: "A" }).acquire(name);
console.log("granted", String(held.token));
const n = await kit.begin(held);
console.log("holding", n);
const rl = createInterface({ input: process.stdin });
for await (const line of rl) {
  if (line.trim() === "write") {
    try {
      await kit.write(held, n + 1, "A");
      console.log("accepted");
    } catch (e) {
      if (!(e instanceof baton.StaleToken)) throw e;
      console.log("refused", e.message.replace(/\n/g, " "));
    }
  }
  break;
}
rl.close();
await kit.close();
process.exit(0);
