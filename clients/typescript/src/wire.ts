/** The bytes of Baton's wire protocol, versions 1 and 2 (docs/protocol.md). */

import { BadRequestError, ProtocolError } from "./errors.js";

/** What an exclusive claim sends: every server speaks it. */
export const VERSION = 1;
/** What a shared claim sends: the SHARED flag and a limit. */
export const VERSION_2 = 2;
export const HEADER_SIZE = 3;
export const MAX_PAYLOAD = 1024;
export const T_ACQUIRE = 0x01;
export const T_HEARTBEAT = 0x02;
export const T_ERROR = 0x80;
export const T_WAITING = 0x81;
export const T_ACQUIRED = 0x82;
export const MAX_LEASE_MS = 0xffffffff;
export const MAX_LIMIT = 0xffff;
export const FLAG_NOWAIT = 0x01;
export const FLAG_SHARED = 0x02;
export const HEARTBEAT = Buffer.from([T_HEARTBEAT, 0, 0]);

function checkText(what: string, raw: Buffer, min: number): void {
  if (raw.length < min) throw new BadRequestError(`${what} is empty`);
  if (raw.length > 255) throw new BadRequestError(`${what} is ${raw.length} bytes, more than 255`);
  try {
    new TextDecoder("utf-8", { fatal: true }).decode(raw);
  } catch {
    throw new BadRequestError(`${what} is not valid UTF-8`);
  }
  for (const b of raw) {
    if (b < 0x20 || b === 0x7f) throw new BadRequestError(`${what} holds the control byte 0x${b.toString(16).padStart(2, "0")}`);
  }
}

/** The lock name's bytes, or BadRequestError: 1..255 bytes of UTF-8, no control bytes. */
export function checkName(name: string | Uint8Array): Buffer {
  const raw = typeof name === "string" ? Buffer.from(name, "utf8") : Buffer.from(name);
  if (typeof name === "string" && raw.toString("utf8") !== name) throw new BadRequestError("lock name is not valid UTF-8");
  checkText("lock name", raw, 1);
  return raw;
}

/** The owner's bytes, or BadRequestError: 0..255 bytes of UTF-8, no control bytes. */
export function checkOwner(owner: string | Uint8Array): Buffer {
  const raw = typeof owner === "string" ? Buffer.from(owner, "utf8") : Buffer.from(owner);
  if (typeof owner === "string" && raw.toString("utf8") !== owner) throw new BadRequestError("owner is not valid UTF-8");
  checkText("owner", raw, 0);
  return raw;
}

/** A lease in milliseconds, checked: a whole number 1..4294967295. */
export function checkLeaseMs(leaseMs: number): number {
  if (!Number.isFinite(leaseMs)) throw new BadRequestError(`lease ${leaseMs}ms is not a number`);
  const ms = Math.floor(leaseMs);
  if (ms < 1) throw new BadRequestError(`lease ${leaseMs}ms must be at least 1ms`);
  if (ms > MAX_LEASE_MS) throw new BadRequestError(`lease ${leaseMs}ms exceeds the protocol's maximum of ${MAX_LEASE_MS}ms`);
  return ms;
}

/** A shared claim's limit, checked: a whole number 1..65535. */
export function checkLimit(limit: unknown): number {
  if (typeof limit !== "number" || !Number.isInteger(limit)) throw new BadRequestError(`limit ${String(limit)} is not a whole number`);
  if (limit < 1 || limit > MAX_LIMIT) throw new BadRequestError(`limit ${limit} must be from 1 to ${MAX_LIMIT}`);
  return limit;
}

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
export function encodeAcquire(name: string | Uint8Array, leaseMs: number, owner: string | Uint8Array = "", nowait = false, claim?: Claim): Buffer {
  const n = checkName(name);
  const o = checkOwner(owner);
  const ms = checkLeaseMs(leaseMs);
  let flags = nowait ? FLAG_NOWAIT : 0;
  if (!claim) {
    const payload = Buffer.alloc(7 + n.length + o.length);
    payload[0] = VERSION;
    payload[1] = flags;
    payload.writeUInt32BE(ms, 2);
    payload[6] = n.length;
    n.copy(payload, 7);
    o.copy(payload, 7 + n.length);
    return encodeFrame(T_ACQUIRE, payload);
  }
  const limit = checkLimit(claim.limit);
  if (claim.shared) flags |= FLAG_SHARED;
  else if (limit !== 1) throw new BadRequestError(`limit ${limit} without SHARED: an exclusive claim's limit must be 1`);
  const payload = Buffer.alloc(9 + n.length + o.length);
  payload[0] = VERSION_2;
  payload[1] = flags;
  payload.writeUInt32BE(ms, 2);
  payload.writeUInt16BE(limit, 6);
  payload[8] = n.length;
  n.copy(payload, 9);
  o.copy(payload, 9 + n.length);
  return encodeFrame(T_ACQUIRE, payload);
}

/** Any frame: type, u16 length, payload. */
export function encodeFrame(type: number, payload: Uint8Array): Buffer {
  const b = Buffer.alloc(HEADER_SIZE + payload.length);
  b[0] = type;
  b.writeUInt16BE(payload.length, 1);
  Buffer.from(payload).copy(b, HEADER_SIZE);
  return b;
}

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
export function decode(type: number, p: Buffer): Frame {
  const f: Frame = { type, position: 0, push: false, token: 0n, code: 0, message: "" };
  if (type === T_WAITING) {
    if (p.length !== 5) throw new ProtocolError(`WAITING payload of ${p.length} bytes, want 5`);
    f.position = p.readUInt32BE(1);
  } else if (type === T_ACQUIRED) {
    if (p.length !== 9) throw new ProtocolError(`ACQUIRED payload of ${p.length} bytes, want 9`);
    f.push = (p[0] & 1) !== 0;
    f.token = p.readBigUInt64BE(1);
    if (f.token === 0n) throw new ProtocolError("ACQUIRED with token 0");
  } else if (type === T_ERROR) {
    if (p.length < 1 || p.length > 513) throw new ProtocolError(`ERROR payload of ${p.length} bytes, want 1..513`);
    f.code = p[0];
    f.message = p.subarray(1).toString("utf8");
  } else {
    throw new ProtocolError(`unexpected frame type 0x${type.toString(16)}`);
  }
  return f;
}

/**
 * Takes every whole frame off the front of buf. A header with a length over
 * MAX_PAYLOAD is an error at once, its payload unread. Returns the frames,
 * the rest of buf, and the error if any.
 */
export function split(buf: Buffer): { frames: Array<[number, Buffer]>; rest: Buffer; error?: string } {
  const frames: Array<[number, Buffer]> = [];
  let off = 0;
  while (buf.length - off >= HEADER_SIZE) {
    const type = buf[off];
    const len = buf.readUInt16BE(off + 1);
    if (len > MAX_PAYLOAD) return { frames, rest: buf.subarray(off), error: `frame length ${len} exceeds the limit of ${MAX_PAYLOAD}` };
    const end = off + HEADER_SIZE + len;
    if (buf.length < end) break;
    frames.push([type, Buffer.from(buf.subarray(off + HEADER_SIZE, end))]);
    off = end;
  }
  return { frames, rest: buf.subarray(off) };
}
