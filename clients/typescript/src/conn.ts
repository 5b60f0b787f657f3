/** One connection of a claim (internal): its socket, its frames, how it ended. */

import type { Socket } from "node:net";
import { inspect } from "node:util";
import { BatonError, ConnectionBroken, ServerError, UnauthorizedError, errorForCode } from "./errors.js";
import * as wire from "./wire.js";

/**
 * What a connection is to its claim: the claim's connection (heartbeats,
 * and its frames confirm), an open resume attempt (its first frame is the
 * answer), or a connection the claim has left (nothing on it counts; it is
 * closed when its server ends it or when the claim ends).
 */
export type Role = "claim" | "attempt" | "left";

/**
 * How a connection ended, from the first sign its reader met: an ERROR
 * frame; the end of the stream at a frame boundary (Node's 'end', no
 * 'error' before it); the end of the stream inside a frame; a reset or any
 * other socket error; a frame no server may send.
 */
export type End =
  | { kind: "error"; error: ServerError }
  | { kind: "eof"; error: ConnectionBroken }
  | { kind: "cut"; error: ConnectionBroken }
  | { kind: "broken"; error: Error }
  | { kind: "violation"; error: Error };

/** What a Conn tells its owner. */
export interface ConnEvents {
  /** A decoded frame other than ERROR, read at `at` (the claim's clock). */
  frame(c: Conn, f: wire.Frame, at: number): void;
  /** The connection ended, from the server's side or the network (never called after close()). */
  ended(c: Conn, how: End): void;
}

/**
 * A connection: `sock` carries the protocol, `raw` is the TCP socket under
 * it (sock itself without TLS), which a release resets. Its 'data' handler
 * is its permanent reader; `v3` lets frames carry a credential.
 */
export class Conn {
  role: Role;
  /** An attempt's resume number (0 for the connection of the claim's ACQUIRE). */
  readonly number: number;
  /** When the attempt's resume (or the ACQUIRE) was sent, on the claim's clock. */
  sentAt = 0;
  /** An attempt's resume: the claim held (id is its token) or waited (its ticket). */
  resume?: { held: boolean; id: bigint };
  /** Its end was met, or it was closed here: nothing more is read from it. */
  done = false;
  readonly closed: Promise<void>;
  private buf: Buffer = Buffer.alloc(0);

  constructor(
    readonly sock: Socket,
    readonly raw: Socket,
    /** The index of its address in the client's list. */
    readonly idx: number,
    readonly addr: string,
    number: number,
    role: Role,
    private readonly v3: boolean,
    private readonly clock: () => number,
    private readonly events: ConnEvents,
  ) {
    this.number = number;
    this.role = role;
    this.closed = new Promise((resolve) => (sock.destroyed ? resolve() : sock.once("close", () => resolve())));
    sock.setNoDelay(true);
    sock.on("data", (d: Buffer) => this.onData(d));
    sock.on("end", () => {
      if (this.buf.length > 0) this.finish({ kind: "cut", error: new ConnectionBroken(`connection to ${addr} ended inside a frame`) });
      else this.finish({ kind: "eof", error: new ConnectionBroken(`connection to ${addr} closed by the server`) });
    });
    sock.on("error", (e: Error & { code?: string }) => {
      if (/CERTIFICATE|ALERT/i.test(String(e.code ?? "") + e.message)) {
        this.finish({ kind: "broken", error: new UnauthorizedError(`TLS: ${addr} refused this client: ${e.message}`) });
      } else {
        this.finish({ kind: "broken", error: new ConnectionBroken(`connection to ${addr}: ${e.message}`) });
      }
    });
    sock.on("close", () => this.finish({ kind: "broken", error: new ConnectionBroken(`connection to ${addr} closed`) }));
  }

  /** Writes one frame. A failed write ends nothing here: the reader meets what explains it. */
  write(frame: Buffer): void {
    if (!this.done) this.sock.write(frame);
  }

  /**
   * Closes it from this side: with a reset (RST: the TCP socket under TLS,
   * without close_notify) when `reset`, else with a FIN.
   */
  close(reset: boolean): void {
    this.done = true;
    if (reset && !this.raw.destroyed) this.raw.resetAndDestroy();
    this.sock.destroy();
  }

  /** Keeps the process from waiting for it (a held lock with unref). */
  unref(): void {
    this.sock.unref();
    this.raw.unref();
  }

  [inspect.custom](): string {
    return `Conn { ${this.role} ${this.addr} #${this.number} }`;
  }

  private finish(how: End): void {
    if (this.done) return;
    this.done = true;
    this.events.ended(this, how);
  }

  private onData(d: Buffer): void {
    if (this.done) return;
    const at = this.clock();
    this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
    const { frames, rest, error } = wire.split(this.buf);
    this.buf = rest;
    for (const [type, payload] of frames) {
      if (this.done) return;
      let f: wire.Frame;
      try {
        f = wire.decode(type, payload, this.v3);
      } catch (e) {
        return this.finish({ kind: "violation", error: new Violation(`server ${this.addr} sent a bad frame: ${(e as Error).message}`) });
      }
      if (f.type === wire.T_ERROR) return this.finish({ kind: "error", error: errorForCode(f.code, f.message) });
      this.events.frame(this, f, at);
    }
    if (error && !this.done) this.finish({ kind: "violation", error: new Violation(`server ${this.addr} sent a bad frame: ${error}`) });
  }
}

/** The server sent a frame that no server may send. */
export class Violation extends BatonError {
  override name = "Violation";
}
