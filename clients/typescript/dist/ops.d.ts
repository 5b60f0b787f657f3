/**
 * The server's ops API, for what the lock protocol cannot ask: who holds a
 * name (an election's leader) and each new holder as it comes (internal).
 * Every node of a cluster answers it, a follower by asking the leader: GET
 * /v1/locks/{name} for the holder, and the event stream GET /v1/events
 * (Server-Sent Events) for its changes.
 */
import type * as tls from "node:tls";
import { BatonError } from "./errors.js";
/** An election's leader: the value it campaigned with (the lock's owner text) and the fencing token of its term. */
export interface Leader {
    readonly value: string;
    readonly token: bigint;
}
/** The ops API answered with an error (401: give adminToken; 403...). */
export declare class OpsError extends BatonError {
    name: string;
}
/** The ops API at the given addresses, tried in order. */
export declare class OpsAPI {
    #private;
    readonly token: string | undefined;
    readonly tlsOptions: tls.ConnectionOptions | undefined;
    constructor(addrs: readonly string[], token: string | undefined, tlsOptions: tls.ConnectionOptions | undefined);
    leader(name: string, signal?: AbortSignal): Promise<Leader | undefined>;
    /** Each new leader of name, from the event stream, until signal aborts. */
    observe(name: string, signal: AbortSignal | undefined, pause: (failures: number) => number): AsyncGenerator<Leader>;
}
