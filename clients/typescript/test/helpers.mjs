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
