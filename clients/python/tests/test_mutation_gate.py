"""The mutation gate of a claim's move: each safety rule of docs/protocol.md
section 14 that the client keeps is broken in turn, in a copy of the
package (a textual mutation, the same a careless change would make), and
the test that guards the rule is run against that copy (BATON_PY_PATH): it
must fail. The lines it failed with are printed, so that the suite's log
shows what each mutation did. A mutation whose text is no longer in the
package fails the gate: the rule moved, and the gate must follow it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from typing import List, NamedTuple

from support import PACKAGE_DIR

HERE = os.path.dirname(os.path.abspath(__file__))


class Mutation(NamedTuple):
    name: str  # the rule broken, as the log says it
    path: str  # a file of the package, from its directory
    old: str  # text found exactly once in it
    new: str
    tests: List[str]  # the tests that guard the rule (unittest names)


def both(test: str) -> List[str]:
    """test of test_move_rules, on both drivers."""
    return [f"test_move_rules.TestRulesThreads.{test}", f"test_move_rules.TestRulesAsyncio.{test}"]


MUTATIONS = [
    Mutation("a reset (or an end inside a frame) moves the claim, as a clean end would",
             "baton/claim.py", "if clean and self.can_resume():", "if self.can_resume():",
             both("test_loses_after")),
    Mutation("every ERROR moves the claim, not only a server condition's (FORCE_RELEASED, LEASE_EXPIRED...)",
             "baton/claim.py", "if self.can_resume() and err.server_condition:", "if self.can_resume():",
             both("test_loses_after")),
    Mutation("after the end of the stream, the same address is dialled again at once "
             "(into a dying process's listening socket, which resets the attempt)",
             "baton/move.py", "if q is not None and now < q:", "if False:",
             both("test_end_of_stream_waits_before_the_same_address")),
    Mutation("the deadline is not checked right before the resume's send (a slow connect sends it past the deadline)",
             "baton/move.py", "if held and now >= self.deadline:", "if False:",
             ["test_claim_core.TestDeadlineBeforeTheSend.test_a_dial_that_completes_after_the_deadline_sends_nothing"]),
    Mutation("a holder adopts an answer to a resume that arrived after its deadline",
             "baton/move.py", "if self.state == HELD and at >= self.deadline:\n            self.end(self.unconfirmed())",
             "if False:\n            self.end(self.unconfirmed())",
             both("test_answer_after_the_deadline_loses")),
    Mutation("an answer of a lower attempt than the claim's connection is adopted",
             "baton/move.py", "if link.number < self.cur_num:", "if False:",
             both("test_attempts_out_of_order")),
    # The thread driver also closes every socket when its thread ends, so
    # the asyncio driver's run is the one that catches this.
    Mutation("a release closes the claim's connection but not its open resume attempts",
             "baton/claim.py", "for link in list(self.links):\n            self._drop(link, reset)",
             "for link in [x for x in self.links if x is self.cur]:\n            self._drop(link, reset)",
             both("test_release_during_a_move")),
    Mutation("the credential is shown by its repr",
             "baton/wire.py", 'return "Credential(redacted)"', 'return f"Credential({self._raw.hex()})"',
             both("test_credential_never_shown")),
    Mutation("an address that answered VERSION is not remembered: every claim tries version 3 there first",
             "baton/client.py", "self._no_v3_at[addr.strip().lower()] = time.monotonic()", "pass",
             both("test_version_fallback_bytes")),
]


def failure_lines(out: str) -> List[str]:
    """The lines of a unittest run that say what failed."""
    keep = []
    for line in out.splitlines():
        s = line.strip()
        bare = s.isidentifier() and s.endswith("Error")  # an exception with no message: "TimeoutError"
        if s.startswith(("FAIL:", "ERROR:", "AssertionError", "baton.", "concurrent.futures")) or "Error:" in s or bare:
            keep.append(s if len(s) <= 240 else s[:240] + "...")
    return keep


@unittest.skipIf(os.environ.get("BATON_PY_PATH"), "the gate mutates this tree's package, not BATON_PY_PATH's")
class TestMutationGate(unittest.TestCase):
    def test_each_mutation_is_caught(self) -> None:
        for m in MUTATIONS:
            with self.subTest(m.name):
                work = tempfile.mkdtemp(prefix="baton-py-mutant-")
                self.addCleanup(shutil.rmtree, work, True)
                shutil.copytree(os.path.join(PACKAGE_DIR, "baton"), os.path.join(work, "baton"),
                                ignore=shutil.ignore_patterns("__pycache__"))
                target = os.path.join(work, m.path)
                with open(target, encoding="utf-8") as f:
                    text = f.read()
                self.assertEqual(text.count(m.old), 1, f"{m.path}: the text to mutate is not there once: {m.old!r}")
                with open(target, "w", encoding="utf-8") as f:
                    f.write(text.replace(m.old, m.new))
                env = dict(os.environ, BATON_PY_PATH=work, PYTHONDONTWRITEBYTECODE="1")
                run = subprocess.run([sys.executable, "-m", "unittest", *m.tests], cwd=HERE, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
                lines = failure_lines(run.stdout)
                self.assertNotEqual(run.returncode, 0,
                                    f"{' '.join(m.tests)} passed with the mutation {m.name!r}: "
                                    f"it does not guard its rule\n{run.stdout}")
                self.assertTrue(lines, f"the run under {m.name!r} failed with no test's line:\n{run.stdout}")
                print(f"\nmutation gate: {m.name}: {' '.join(m.tests)} failed: " + "; ".join(lines),
                      file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
