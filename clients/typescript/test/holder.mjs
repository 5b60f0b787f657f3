// A holder for the pause tests, run as a child process: it takes a lock,
// prints "held TOKEN", then
//
//  - steps: works in small CPU-bound steps, ten in a row between turns of
//    the event loop, and asks held.check() before each one, as the docs
//    ask. When a step comes more than GAP ms after the one before it (the
//    test stopped the process with SIGSTOP and resumed it), it prints what
//    that first check after the pause said and exits.
//  - block: on a line "block MS" on stdin, blocks its event loop for MS ms
//    (Atomics.wait), then asks held.check() at once and prints what it said.
//
//   after a pause of 2104 ms: lost Unconfirmed    (what must happen)
//   after a pause of 2104 ms: ok                  (the step ran on a lost lock)
//
// usage: node holder.mjs ADDR NAME LEASE_MS GAP_MS steps|block
// BATON_TS_PATH imports another copy of the package (e.g. an older one).
import { createInterface } from "node:readline";
import { performance } from "node:perf_hooks";
import { pathToFileURL } from "node:url";

const baton = await import(process.env.BATON_TS_PATH ? pathToFileURL(process.env.BATON_TS_PATH).href : "baton-client");
const [addr, name, leaseMs, gapMs, mode] = process.argv.slice(2);
const gap = Number(gapMs);

function said(held) {
  try {
    held.check();
    return "ok";
  } catch (e) {
    return e instanceof baton.LockLost ? `lost ${e.cause?.name ?? e.reason?.name}` : `error ${e}`;
  }
}

// A step of work that holds the event loop, as computation does. It returns
// the time of its last clock read, or, when the clock jumped by more than
// GAP between two reads (the process was stopped), the time before the jump
// at once: the next thing after a pause is then the next step's check.
function spin(ms) {
  let before = performance.now();
  const end = before + ms;
  for (;;) {
    const now = performance.now();
    if (now - before > gap) return before;
    if (now >= end) return now;
    before = now;
  }
}

const held = await new baton.Client([addr], { leaseMs: Number(leaseMs) }).acquire(name);
console.log(`held ${held.token}`);

if (mode === "block") {
  const rl = createInterface({ input: process.stdin });
  rl.once("line", (line) => {
    const ms = Number(line.split(" ")[1]);
    const start = performance.now();
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
    const result = said(held);
    console.log(`after a pause of ${Math.round(performance.now() - start)} ms: ${result}`);
    process.exit(0);
  });
} else {
  let last = performance.now();
  for (;;) {
    for (let i = 0; i < 10; i++) {
      const now = performance.now();
      const result = said(held);
      if (now - last > gap) {
        console.log(`after a pause of ${Math.round(now - last)} ms: ${result}`);
        process.exit(0);
      }
      if (result !== "ok") {
        console.log(`lost before any pause: ${result}`);
        process.exit(0);
      }
      last = spin(1);
    }
    await new Promise((resolve) => setImmediate(resolve));
  }
}
