/**
 * The clock on which a lock's deadline is measured (internal): one that
 * counts a suspend of the machine.
 *
 * Node's monotonic clocks (`performance.now()`, `process.hrtime`, and the
 * timers, which count libuv's CLOCK_MONOTONIC) stop while the machine is
 * suspended on Linux (a laptop's lid, a virtual machine paused or restored
 * from a snapshot), while the server's clock and the other clients' go on:
 * a holder whose host slept past its deadline would wake up believing it
 * holds a lock that the server has given to another. Node offers no clock
 * that counts a suspend at a usable cost (`os.uptime()` reads /proc/uptime:
 * a file read of about 2 µs, in steps of 10 ms), so the clock is the
 * monotonic one plus every jump of the wall clock (`Date.now()`, which
 * counts a suspend) ahead of it: what a suspend looks like from inside the
 * process. A step of the wall clock forward then counts as a suspend too,
 * which can end a lock early, never late. The Go and Python clients decide
 * alike where their platform has no suspend-counting clock.
 */

import { performance } from "node:perf_hooks";

/** Milliseconds from an arbitrary origin: compare readings only with each other. */
export type Clock = () => number;

/**
 * How far the wall clock may move against the monotonic clock before it
 * counts as a suspend, in ms: above the jitter of reading the two one after
 * the other (Date.now() has whole milliseconds). A shorter suspend can go
 * unseen; a step of the wall clock forward by more ends deadlines early by
 * as much.
 */
export const TOLERANCE_MS = 2;

/**
 * The monotonic clock plus every jump of the wall clock ahead of it by
 * more than TOLERANCE_MS since the last jump counted. A fall behind by
 * more (a step back) moves the reference back, uncounted, so that a suspend
 * after it is still seen whole; changes within TOLERANCE_MS (jitter, a rate
 * drift) move nothing, so they do not add up.
 */
export class WallChecked {
  private ref?: number; // wall − monotonic after the last jump counted
  private ahead = 0; // the jumps counted
  /** The clock's reading. */
  readonly now: Clock = () => this.advance(Date.now(), performance.now());
  /** The reading for one pair of readings of the wall and monotonic clocks. */
  advance(wall: number, mono: number): number {
    const skew = wall - mono;
    if (this.ref === undefined) {
      this.ref = skew;
    } else if (skew > this.ref + TOLERANCE_MS) {
      this.ahead += skew - this.ref;
      this.ref = skew;
    } else if (skew < this.ref - TOLERANCE_MS) {
      this.ref = skew;
    }
    return mono + this.ahead;
  }
}
