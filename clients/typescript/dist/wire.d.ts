/** The bytes of Baton's wire protocol, versions 1 and 2 (docs/protocol.md). */
/** What an exclusive claim sends: every server speaks it. */
export declare const VERSION = 1;
/** What a shared claim sends: the SHARED flag and a limit. */
export declare const VERSION_2 = 2;
export declare const HEADER_SIZE = 3;
export declare const MAX_PAYLOAD = 1024;
export declare const T_ACQUIRE = 1;
export declare const T_HEARTBEAT = 2;
export declare const T_ERROR = 128;
export declare const T_WAITING = 129;
export declare const T_ACQUIRED = 130;
export declare const MAX_LEASE_MS = 4294967295;
export declare const MAX_LIMIT = 65535;
export declare const FLAG_NOWAIT = 1;
export declare const FLAG_SHARED = 2;
export declare const HEARTBEAT: Buffer<ArrayBuffer>;
/** The lock name's bytes, or BadRequestError: 1..255 bytes of UTF-8, no control bytes. */
export declare function checkName(name: string | Uint8Array): Buffer;
/** The owner's bytes, or BadRequestError: 0..255 bytes of UTF-8, no control bytes. */
export declare function checkOwner(owner: string | Uint8Array): Buffer;
/** A lease in milliseconds, checked: a whole number 1..4294967295. */
export declare function checkLeaseMs(leaseMs: number): number;
/** A shared claim's limit, checked: a whole number 1..65535. */
export declare function checkLimit(limit: unknown): number;
/** The version 2 fields of an ACQUIRE: a claim's kind and its limit. */
export interface Claim {
    shared: boolean;
    limit: number;
}
/**
 * An ACQUIRE frame, after the checks the server would make. Without a
 * claim it is version 1 (an exclusive claim); with one, version 2, whose
 * `shared` makes the claim shared (an exclusive claim's limit must be 1).
 */
export declare function encodeAcquire(name: string | Uint8Array, leaseMs: number, owner?: string | Uint8Array, nowait?: boolean, claim?: Claim): Buffer;
/** Any frame: type, u16 length, payload. */
export declare function encodeFrame(type: number, payload: Uint8Array): Buffer;
/** One frame from the server, decoded. */
export interface Frame {
    type: number;
    position: number;
    push: boolean;
    token: bigint;
    code: number;
    message: string;
}
/** Decodes a server frame's payload, or throws ProtocolError. */
export declare function decode(type: number, p: Buffer): Frame;
/**
 * Takes every whole frame off the front of buf. A header with a length over
 * MAX_PAYLOAD is an error at once, its payload unread. Returns the frames,
 * the rest of buf, and the error if any.
 */
export declare function split(buf: Buffer): {
    frames: Array<[number, Buffer]>;
    rest: Buffer;
    error?: string;
};
