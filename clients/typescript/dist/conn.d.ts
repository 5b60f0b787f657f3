/** One connection of a claim (internal): its socket, its frames, how it ended. */
import type { Socket } from "node:net";
import { inspect } from "node:util";
import { BatonError, ConnectionBroken, ServerError } from "./errors.js";
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
export type End = {
    kind: "error";
    error: ServerError;
} | {
    kind: "eof";
    error: ConnectionBroken;
} | {
    kind: "cut";
    error: ConnectionBroken;
} | {
    kind: "broken";
    error: Error;
} | {
    kind: "violation";
    error: Error;
};
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
export declare class Conn {
    readonly sock: Socket;
    readonly raw: Socket;
    /** The index of its address in the client's list. */
    readonly idx: number;
    readonly addr: string;
    private readonly v3;
    private readonly clock;
    private readonly events;
    role: Role;
    /** An attempt's resume number (0 for the connection of the claim's ACQUIRE). */
    readonly number: number;
    /** When the attempt's resume (or the ACQUIRE) was sent, on the claim's clock. */
    sentAt: number;
    /** An attempt's resume: the claim held (id is its token) or waited (its ticket). */
    resume?: {
        held: boolean;
        id: bigint;
    };
    /** Its end was met, or it was closed here: nothing more is read from it. */
    done: boolean;
    readonly closed: Promise<void>;
    private buf;
    constructor(sock: Socket, raw: Socket, 
    /** The index of its address in the client's list. */
    idx: number, addr: string, number: number, role: Role, v3: boolean, clock: () => number, events: ConnEvents);
    /** Writes one frame. A failed write ends nothing here: the reader meets what explains it. */
    write(frame: Buffer): void;
    /**
     * Closes it from this side: with a reset (RST: the TCP socket under TLS,
     * without close_notify) when `reset`, else with a FIN.
     */
    close(reset: boolean): void;
    /** Keeps the process from waiting for it (a held lock with unref). */
    unref(): void;
    [inspect.custom](): string;
    private finish;
    private onData;
}
/** The server sent a frame that no server may send. */
export declare class Violation extends BatonError {
    name: string;
}
