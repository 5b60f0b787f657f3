// The mutation gate of the client's resume rules (run by .ci/tsclient.sh):
// each mutation removes one safety rule of docs/protocol.md section 14 from
// a copy of the built package (dist/session.js, dist/move.js), and the test
// that guards the rule must fail on that copy. The worktree is never touched.
//
// usage: node test/mutations.mjs        (exits 1 if a mutation survives)
import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const PKG = join(dirname(fileURLToPath(import.meta.url)), "..");

// [what the rule is, the file of dist/, its text there, what replaces it, the guarding test]
const MUTATIONS = [
  ["a reset is not a move", "session.js", 'how.kind === "eof";', 'how.kind === "eof" || how.kind === "broken";', "a reset: lost at once"],
  ["an answer after the deadline confirms nothing", "session.js", "if (f.type === wire.T_ACQUIRED && at >= limit) {", "if (false) {", "arrives after the deadline"],
  ["the deadline is read right before a resume is sent", "session.js", "// answered, and believed, after it.\n            if (this.state === \"held\" && this.opts.clock() >= this.deadline) {", "if (false) {", "checked right before"],
  ["a lower attempt's late answer is not adopted", "session.js", "if (c.number < this.#connNumber) {", "if (false) {", "answers out of order"],
  ["MOVED with no attempt of its own to that address is a loss", "session.js", "if ([...this.#attempts].some((a) => a.idx === c.idx)) {", "if (true) {", "with no move of its own"],
  ["one open attempt per address", "move.js", "if (!open.has(i)) {", "if (true) {", "one open attempt per address"],
];

/** A copy of the package whose dist/`name` has `from` replaced by `to` (none: unmutated); runs the tests matching `pattern`. */
function run(pattern, name, from, to) {
  const dir = mkdtempSync(join(tmpdir(), "baton-ts-mutant-"));
  try {
    for (const d of ["dist", "test", "fence"]) cpSync(join(PKG, d), join(dir, d), { recursive: true });
    cpSync(join(PKG, "package.json"), join(dir, "package.json"));
    symlinkSync(join(PKG, "node_modules"), join(dir, "node_modules"));
    if (from !== undefined) {
      const file = join(dir, "dist", name);
      const src = readFileSync(file, "utf8");
      if (src.split(from).length !== 2) throw new Error(`the text ${JSON.stringify(from)} is not in dist/${name} exactly once; update test/mutations.mjs`);
      writeFileSync(file, src.replace(from, to));
    }
    const r = spawnSync(process.execPath, ["--test", `--test-name-pattern=${pattern}`, "test/resume.test.mjs"], { cwd: dir, encoding: "utf8", timeout: 180_000 });
    return r.stdout + r.stderr;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const esc = (t) => t.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
// First, without a mutation: every guarding test passes (a gate whose
// tests cannot run would kill every mutation).
const base = run(MUTATIONS.map((m) => esc(m[4])).join("|"));
const basePass = Number(base.match(/^# pass (\d+)/m)?.[1] ?? 0);
if (/^# fail [1-9]/m.test(base) || basePass < MUTATIONS.length) {
  console.error(base);
  console.error(`the guarding tests do not pass without a mutation (${basePass} passed)`);
  process.exit(1);
}
let survived = 0;
for (const [rule, name, from, to, test] of MUTATIONS) {
  const out = run(esc(test), name, from, to);
  // Killed: the guarding test itself failed (not the file, not another test).
  const failed = out.split("\n").find((l) => /^\s+not ok \d+ - /.test(l) && l.includes(test));
  const why = out.match(/^\s+error: (.*)$/m)?.[1] ?? "";
  if (failed) {
    console.log(`killed   ${rule}: "${test}" failed: ${why}`);
  } else {
    survived++;
    console.log(`SURVIVED ${rule}: "${test}" did not fail without the rule`);
  }
}
if (survived) {
  console.error(`${survived} of ${MUTATIONS.length} mutations survived: a rule of the client's moves is not guarded by its test`);
  process.exit(1);
}
console.log(`all ${MUTATIONS.length} mutations killed`);
