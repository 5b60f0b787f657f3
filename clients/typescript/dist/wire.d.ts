/** The bytes of Baton's wire protocol, versions 1 to 3 (docs/protocol.md). */
import { inspect } from "node:util";
/** What an exclusive claim sends without resume: every server speaks it. */
export declare const VERSION = 1;
/** What a shared claim sends without resume: the SHARED flag and a limit. */
export declare const VERSION_2 = 2;
/** A claim that can move to the next server (section 14): a credential, tickets, resumes. */
export declare const VERSION_3 = 3;
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
/** ACQUIRE, version 3: the frame continues a claim; the resume block follows the limit. */
export declare const FLAG_RESUME = 4;
/** ACQUIRE, version 3, with RESUME: the claim holds (resume_id is its token, else its ticket). */
export declare const FLAG_HELD = 8;
/** ACQUIRED: an unsolicited promotion. */
export declare const FLAG_PUSH = 1;
/** ACQUIRED, version 3: a generation and a credential follow the token. */
export declare const FLAG_CREDENTIAL = 2;
/** WAITING, version 3: a ticket, a generation and a credential follow the position. */
export declare const FLAG_TICKET = 1;
export declare const CREDENTIAL_SIZE = 16;
export declare const MAX_ATTEMPT = 65535;
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
/**
 * What lets a connection take a claim over: 16 bytes that the server
 * computed with its key. The bytes live in a private field: the object
 * prints, inspects and serialises as a redacted text, so that no log, error
 * or JSON can carry them; only `bytes()`, for the wire, gives them out.
 */
export declare class Credential {
    #private;
    constructor(bytes: Uint8Array);
    /** A copy of the 16 bytes, to write into a resume. */
    bytes(): Buffer;
    toString(): string;
    toJSON(): string;
    [inspect.custom](): string;
}
/** The resume block of a version 3 ACQUIRE: what the client kept of the claim it continues. */
export interface Resume {
    /** The claim holds the name: `id` is its token; else its ticket. */
    held: boolean;
    /** The token or the ticket; never 0. */
    id: bigint;
    /** The credential's generation, 1 to 2^32 - 1. */
    generation: number;
    /** This resume's number, 1 to 65535, higher than every earlier one of the claim. */
    attempt: number;
    credential: Credential;
}
/**
 * A version 3 ACQUIRE, after the checks the server would make: a new claim
 * (the layout of version 2 with version 3) or, with `resume`, a resume of
 * the claim it names, whose lease, kind, limit and name must be those of
 * the claim as it was granted.
 */
export declare function encodeAcquireV3(name: string | Uint8Array, leaseMs: number, owner: string | Uint8Array, nowait: boolean, claim: Claim, resume?: Resume): Buffer;
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
    /** WAITING with TICKET: the waiter's ticket; 0 otherwise. */
    ticket: bigint;
    /** ACQUIRED with CREDENTIAL, WAITING with TICKET: the credential's generation; 0 otherwise. */
    generation: number;
    /** ACQUIRED with CREDENTIAL, WAITING with TICKET: the claim's credential. */
    credential?: Credential;
}
/**
 * Decodes a server frame's payload, or throws ProtocolError. In a session
 * of version 3 (`v3`), ACQUIRED and WAITING may carry a credential (29 and
 * 33 bytes, with their flag); in one of version 1 or 2 they never do.
 */
export declare function decode(type: number, p: Buffer, v3?: boolean): Frame;
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
