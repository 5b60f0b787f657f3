/**
 * The server's ops API, for what the lock protocol cannot ask: who holds a
 * name (an election's leader) and each new holder as it comes (internal).
 * Every node of a cluster answers it, a follower by asking the leader: GET
 * /v1/locks/{name} for the holder, and the event stream GET /v1/events
 * (Server-Sent Events) for its changes.
 */

import * as http from "node:http";
import * as https from "node:https";
import type * as tls from "node:tls";
import { BadRequestError, BatonError, ConnectionBroken } from "./errors.js";

/** An election's leader: the value it campaigned with (the lock's owner text) and the fencing token of its term. */
export interface Leader {
  readonly value: string;
  readonly token: bigint;
}

/** The ops API answered with an error (401: give adminToken; 403...). */
export class OpsError extends BatonError {
  override name = "OpsError";
}

function leaderOf(lock: unknown): Leader | undefined {
  const holder = (lock as { holder?: { owner?: unknown; token?: unknown } } | null)?.holder;
  if (!holder || typeof holder.token !== "number") return undefined;
  return { value: String(holder.owner ?? ""), token: BigInt(holder.token) };
}

/** The ops API at the given addresses, tried in order. */
export class OpsAPI {
  readonly #bases: URL[];
  #next = 0;
  constructor(addrs: readonly string[], readonly token: string | undefined, readonly tlsOptions: tls.ConnectionOptions | undefined) {
    this.#bases = addrs.map((a) => {
      let u: URL;
      try {
        u = new URL(a.includes("://") ? a : `${tlsOptions ? "https" : "http"}://${a}`);
      } catch {
        throw new BadRequestError(`ops address ${JSON.stringify(a)} is not host:port or an http(s) URL`);
      }
      if (u.protocol !== "http:" && u.protocol !== "https:") throw new BadRequestError(`ops address ${JSON.stringify(a)} is not host:port or an http(s) URL`);
      return u;
    });
  }

  /** GET path from the first node that answers. */
  async #get(path: string, accept: string, signal?: AbortSignal): Promise<http.IncomingMessage> {
    if (this.#bases.length === 0) throw new BadRequestError("no ops API address: give the Client opsAddrs (the server's -ops-addr)");
    const errors: string[] = [];
    for (let k = 0; k < this.#bases.length; k++) {
      const i = (this.#next + k) % this.#bases.length;
      const base = this.#bases[i];
      try {
        const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
          const headers: Record<string, string> = { Accept: accept };
          if (this.token) headers.Authorization = `Bearer ${this.token}`;
          const opts = { method: "GET", headers, signal, agent: false as const };
          const req = base.protocol === "https:" ? https.request(new URL(path, base), { ...this.tlsOptions, ...opts }) : http.request(new URL(path, base), opts);
          req.once("response", resolve);
          req.once("error", reject);
          req.end();
        });
        this.#next = i;
        return res;
      } catch (e) {
        if (signal?.aborted) throw signal.reason;
        errors.push(`${base.host}: ${(e as Error).message}`);
      }
    }
    throw new ConnectionBroken(`no ops API answered: ${errors.join("; ")}`);
  }

  static async #refusal(res: http.IncomingMessage): Promise<OpsError> {
    let body = "";
    for await (const chunk of res) body += chunk;
    let msg = res.statusMessage ?? "";
    try {
      const e = (JSON.parse(body) as { error?: unknown }).error;
      if (typeof e === "string") msg = e;
    } catch {
      // not the API's JSON: the status says it
    }
    return new OpsError(`the ops API answered ${res.statusCode}: ${msg}`);
  }

  async leader(name: string, signal?: AbortSignal): Promise<Leader | undefined> {
    const res = await this.#get(`/v1/locks/${encodeURIComponent(name)}`, "application/json", signal);
    if (res.statusCode === 404) {
      res.resume();
      return undefined;
    }
    if (res.statusCode !== 200) throw await OpsAPI.#refusal(res);
    let body = "";
    for await (const chunk of res) body += chunk;
    return leaderOf(JSON.parse(body));
  }

  /** Each new leader of name, from the event stream, until signal aborts. */
  async *observe(name: string, signal: AbortSignal | undefined, pause: (failures: number) => number): AsyncGenerator<Leader> {
    let last: Leader | undefined = await this.leader(name, signal); // a refusal or a wrong address throws here
    if (last) yield last;
    let failures = 0;
    const path = `/v1/events?snapshot=1&lock=${encodeURIComponent(name)}`;
    while (!signal?.aborted) {
      try {
        const res = await this.#get(path, "text/event-stream", signal);
        if (res.statusCode !== 200) throw await OpsAPI.#refusal(res);
        for await (const leader of granted(res, name)) {
          failures = 0;
          if (!last || leader.value !== last.value || leader.token !== last.token) {
            last = leader;
            yield leader;
          }
        }
      } catch (e) {
        if (signal?.aborted) return;
        if (e instanceof OpsError) throw e;
      }
      failures++;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, pause(failures));
        signal?.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
      });
    }
  }
}

/** The holders of name that an event stream tells of: its snapshot's, then each granted event's. */
async function* granted(res: http.IncomingMessage, name: string): AsyncGenerator<Leader> {
  let buf = "";
  let type = "";
  let data = "";
  res.setEncoding("utf8");
  for await (const chunk of res as AsyncIterable<string>) {
    buf += chunk;
    let nl: number;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, "");
      buf = buf.slice(nl + 1);
      if (line !== "") {
        const i = line.indexOf(":");
        const field = i < 0 ? line : line.slice(0, i);
        const value = i < 0 ? "" : line.slice(i + 1).trimStart();
        if (field === "event") type = value;
        else if (field === "data") data = value;
        continue;
      }
      let doc: Record<string, unknown> = {};
      try {
        doc = data ? (JSON.parse(data) as Record<string, unknown>) : {};
      } catch {
        doc = {};
      }
      if (type === "snapshot" || type === "resync") {
        for (const lock of Array.isArray(doc.locks) ? doc.locks : []) {
          const l = leaderOf(lock);
          if (l && (lock as { name?: unknown }).name === name) yield l;
        }
      } else if (type === "granted" && doc.lock === name) {
        const l = leaderOf({ holder: doc.session });
        if (l) yield l;
      } else if (type === "shutdown") {
        res.destroy();
        return;
      }
      type = "";
      data = "";
    }
  }
}
