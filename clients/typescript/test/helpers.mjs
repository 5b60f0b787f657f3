// Test helpers: the real baton serve (BATON_BIN, else built with go build)
// and the project's fault proxy as a process, on loopback ports the kernel
// picks, stopped by PID.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";

export const REPO = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

let built;
export function batonBin() {
  if (process.env.BATON_BIN) return process.env.BATON_BIN;
  if (!built) {
    built = join(mkdtempSync(join(tmpdir(), "baton-ts-")), "baton");
    execFileSync("go", ["build", "-o", built, "./cmd/baton"], { cwd: REPO, stdio: "inherit" });
  }
  return built;
}

let proxyBuilt;
export function faultproxyBin() {
  if (process.env.BATON_FAULTPROXY_BIN) return process.env.BATON_FAULTPROXY_BIN;
  if (!proxyBuilt) {
    proxyBuilt = join(mkdtempSync(join(tmpdir(), "baton-ts-")), "faultproxy");
    execFileSync("go", ["build", "-o", proxyBuilt, "./internal/faultproxy/cmd/faultproxy"], { cwd: REPO, stdio: "inherit" });
  }
  return proxyBuilt;
}

export async function startServer({ dataDir, addr = "127.0.0.1:0", opsAddr = "127.0.0.1:0", extra = [] } = {}) {
  dataDir ??= mkdtempSync(join(tmpdir(), "baton-ts-data-"));
  const proc = spawn(batonBin(), ["serve", "-addr", addr, "-ops-addr", opsAddr, "-data-dir", dataDir,
    "-log-format", "json", "-shutdown-linger", "0s", ...extra], { stdio: ["ignore", "ignore", "pipe"] });
  const exited = new Promise((resolve) => proc.once("exit", resolve));
  const rl = createInterface({ input: proc.stderr });
  const serving = await new Promise((resolve, reject) => {
    rl.on("line", (line) => {
      try {
        const rec = JSON.parse(line);
        if (rec.msg === "baton serving") resolve(rec);
      } catch {}
    });
    proc.once("exit", (code) => reject(new Error(`baton serve exited ${code} before serving`)));
  });
  return {
    addr: serving.addr, ops: serving.ops_addr, dataDir, proc,
    async stop(signal = "SIGTERM") {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      await exited;
    },
    async forceRelease(name) {
      const r = await fetch(`http://${serving.ops_addr}/v1/locks/${encodeURIComponent(name)}/release`, { method: "POST" });
      if (!r.ok) throw new Error(`force-release ${name}: ${r.status}`);
    },
    async waiters(name) {
      const r = await fetch(`http://${serving.ops_addr}/v1/locks/${encodeURIComponent(name)}`);
      if (!r.ok) return 0;
      return (await r.json()).waiters.length;
    },
  };
}

export async function awaitWaiters(srv, name, n) {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if ((await srv.waiters(name)) >= n) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`${name}: fewer than ${n} waiters after 10 s`);
}

export async function startProxy(target, delay = "0s") {
  const log = join(mkdtempSync(join(tmpdir(), "baton-ts-proxy-")), "frames.jsonl");
  const proc = spawn(faultproxyBin(), ["-target", target, "-delay", delay, "-log", log], { stdio: ["pipe", "pipe", "inherit"] });
  const rl = createInterface({ input: proc.stdout });
  const lines = [];
  let waiting;
  rl.on("line", (l) => (waiting ? (waiting(l), (waiting = undefined)) : lines.push(l)));
  const next = () => (lines.length ? Promise.resolve(lines.shift()) : new Promise((r) => (waiting = r)));
  const first = (await next()).split(" ");
  if (first[0] !== "listening") throw new Error(`faultproxy said ${first}`);
  const exited = new Promise((resolve) => proc.once("exit", resolve));
  return {
    addr: first[1],
    async command(line) {
      proc.stdin.write(line + "\n");
      const answer = await next();
      if (answer !== "ok") throw new Error(`faultproxy ${line}: ${answer}`);
    },
    chunks() {
      return readFileSync(log, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
    },
    async stop() {
      proc.stdin.end();
      await exited;
    },
  };
}

/** Loopback ports the kernel gives now, released for a process to take (the Raft addresses a cluster's -peers must name before its nodes start). */
async function freePorts(n) {
  const { createServer } = await import("node:net");
  const servers = await Promise.all(Array.from({ length: n }, () => new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => resolve(s));
  })));
  const ports = servers.map((s) => s.address().port);
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  return ports;
}

/**
 * A cluster of three real `baton serve` nodes on loopback (docs/operations.md,
 * "Starting a cluster"), each stopped by its PID at the end. node.stop(signal)
 * stops one; node.start() starts it again on its data directory and ports.
 */
export async function startCluster() {
  const ports = await freePorts(9);
  const nodes = [0, 1, 2].map((i) => ({
    id: `n${i + 1}`,
    raft: `127.0.0.1:${ports[3 * i]}`,
    addr: `127.0.0.1:${ports[3 * i + 1]}`,
    ops: `127.0.0.1:${ports[3 * i + 2]}`,
    dataDir: mkdtempSync(join(tmpdir(), "baton-ts-node-")),
  }));
  const peers = nodes.map((n) => `${n.id}=${n.raft}`).join(",");
  for (const n of nodes) {
    n.start = () => {
      n.proc = spawn(batonBin(), ["serve", "-node-id", n.id, "-raft-addr", n.raft, "-peers", peers, "-addr", n.addr,
        "-ops-addr", n.ops, "-data-dir", n.dataDir, "-shutdown-linger", "0s", "-log-format", "json"], { stdio: ["ignore", "ignore", "ignore"] });
      n.exited = new Promise((resolve) => n.proc.once("exit", resolve));
    };
    n.stop = async (signal = "SIGTERM") => {
      if (n.proc.exitCode === null && n.proc.signalCode === null) n.proc.kill(signal);
      return n.exited;
    };
    n.view = async () => {
      try {
        const r = await fetch(`http://${n.ops}/v1/cluster`, { signal: AbortSignal.timeout(2000) });
        return r.ok ? await r.json() : undefined;
      } catch {
        return undefined;
      }
    };
    n.start();
  }
  const cluster = {
    nodes,
    addrs: nodes.map((n) => n.addr),
    /** The node that leads and is ready to serve (its /readyz answers 200), among those running. */
    async leader(ms = 30_000) {
      const deadline = Date.now() + ms;
      for (;;) {
        for (const n of nodes) {
          if (n.proc.exitCode !== null || n.proc.signalCode !== null) continue;
          try {
            const r = await fetch(`http://${n.ops}/readyz`, { signal: AbortSignal.timeout(2000) });
            if (r.status === 200) return n;
          } catch {}
        }
        if (Date.now() > deadline) throw new Error(`no node became a ready leader within ${ms} ms`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    /** Waits until every running node follows a leader with the log. */
    async settled(ms = 30_000) {
      const deadline = Date.now() + ms;
      for (;;) {
        const views = await Promise.all(nodes.filter((n) => n.proc.exitCode === null && n.proc.signalCode === null).map((n) => n.view()));
        if (views.every((v) => v?.leader && v.epoch > 0)) return;
        if (Date.now() > deadline) throw new Error(`the cluster did not settle within ${ms} ms`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    async stop() {
      await Promise.all(nodes.map((n) => n.stop("SIGKILL")));
    },
  };
  await cluster.settled();
  return cluster;
}
