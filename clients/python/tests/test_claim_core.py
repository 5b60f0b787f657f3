"""Rules of a claim's move that need an exact instant, on the sans-I/O core
(baton.claim / baton.move) that both drivers run: the test is the driver,
so it chooses when a dial completes and what the clock says then."""

from __future__ import annotations

import unittest
from typing import List

import support  # noqa: F401  (puts the package under test on the path)
from fakev3 import acquired_frame, error_frame

from baton import wire
from baton.claim import ENDED, Action, Dial, Ended, Mover, Send, Spec
from baton.errors import Unconfirmed
from baton.move import Claim

CRED = bytes.fromhex("68ed1cf56c6decb4aae3230bcc9f04d5")  # the vectors' holder credential, generation 1
TOKEN = 0x0000030000000007
ADDR = "127.0.0.1:7070"


def held_claim(lease_ms: int = 10000) -> Claim:
    """A claim of version 3 granted at time 0 with a credential: its
    deadline is 0.8 x lease."""
    c = Claim("jobs", ADDR, lease_ms, v3=True, spec=Spec("jobs", "h:1", lease_ms, False, 1), mover=Mover([ADDR]),
              rand=lambda: 0.0)
    c.start(wire.encode_acquire_v3("jobs", lease_ms, "h:1"), 0.0)
    c.feed(c.first, acquired_frame(TOKEN, 1, CRED), 0.01)
    assert c.state == "held" and c.can_resume()
    c.take()
    return c


def of(kind: type, acts: List[Action]) -> List[Action]:
    return [a for a in acts if isinstance(a, kind)]


class TestDeadlineBeforeTheSend(unittest.TestCase):
    def test_a_dial_that_completes_after_the_deadline_sends_nothing(self) -> None:
        """The deadline, checked right before the send: a connection that
        took until past the deadline (SYN retries, a slow handshake) is
        closed unused and the claim is lost; a resume sent then could be
        answered as if the claim still held."""
        c = held_claim()
        c.feed(c.first, error_frame("SHUTDOWN", "bye"), 1.0)
        dials = of(Dial, c.take())
        self.assertEqual([d.addr for d in dials], [ADDR], "SHUTDOWN: a resume to the same address")  # type: ignore[attr-defined]
        link = c.dialed(ADDR, True, 8.0)  # connected at the deadline: 8 s after the ACQUIRE's send
        acts = c.take()
        self.assertIsNone(link, "a link to send the resume on, past the deadline")
        self.assertEqual(of(Send, acts), [], "a resume was sent past the deadline")
        self.assertEqual(c.state, ENDED)
        self.assertIsInstance(c.cause, Unconfirmed)
        self.assertEqual(of(Ended, acts), [Ended(True)])

    def test_a_dial_that_completes_before_the_deadline_sends_the_resume(self) -> None:
        """The control: the same dial a moment earlier sends the resume."""
        c = held_claim()
        c.feed(c.first, error_frame("SHUTDOWN", "bye"), 1.0)
        c.take()
        link = c.dialed(ADDR, True, 7.99)
        sends = of(Send, c.take())
        self.assertIsNotNone(link)
        self.assertEqual(len(sends), 1)
        self.assertEqual(sends[0].link, link)  # type: ignore[attr-defined]
        self.assertTrue(c.state != ENDED)


if __name__ == "__main__":
    unittest.main()
