"""Leader election on top of the lock: the candidate that holds the name
leads, with its value as the owner text that operators see (``baton
locks``, the ops API, the dashboard); the others wait in the queue, in the
order they came, and the next one leads the moment the leader resigns or is
lost."""

from __future__ import annotations

from typing import Any, Optional

from . import wire
from .held import Acquirer, AsyncHeld, CancelOnLoss, Held, release_leaving

__all__ = ["Leadership", "AsyncLeadership", "campaign", "acampaign"]


class Leadership(Held):
    """This candidate leads while it holds the name. ``check()`` raises
    LockLost once leadership has ended (by the clock, at once); ``token``
    fences what the leader writes."""

    value: str = ""

    def resign(self) -> None:
        """Gives up leadership; the next candidate leads at once."""
        self.release()


class AsyncLeadership(AsyncHeld):
    """The asyncio form of Leadership."""

    value: str = ""

    async def resign(self) -> None:
        await self.release()


class campaign:
    """``with client.campaign(name, value) as leader:`` waits until this
    candidate leads, then leads for the block; leaving it resigns. Leaving
    raises LockLost if leadership was lost inside it; check ``leader.check()``
    before each step a leader alone may take."""

    def __init__(self, client: Acquirer, name: str, value: str, timeout: Optional[float] = None) -> None:
        wire.check_owner(value)
        self._client, self._name, self._value, self._timeout = client, name, value, timeout
        self._leader: Optional[Leadership] = None

    def __enter__(self) -> Leadership:
        held = self._client.acquire(self._name, timeout=self._timeout, owner=self._value)
        leader = Leadership(held._disown())
        leader.value = self._value
        self._leader = leader
        return leader

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._leader is not None
        release_leaving(self._leader.resign, exc)


class acampaign:
    """``async with client.acampaign(name, value) as leader:``: the task that
    runs the block is cancelled at once when leadership is lost, and
    LockLost comes out of the block."""

    def __init__(self, client: Acquirer, name: str, value: str, timeout: Optional[float] = None) -> None:
        wire.check_owner(value)
        self._client, self._name, self._value, self._timeout = client, name, value, timeout
        self._leader: Optional[AsyncLeadership] = None
        self._guard = CancelOnLoss()

    async def __aenter__(self) -> AsyncLeadership:
        held = await self._client.aacquire(self._name, timeout=self._timeout, owner=self._value)
        leader = AsyncLeadership(held._disown())
        leader.value = self._value
        self._leader = leader
        held._s.on_loss(self._guard.watch())
        return leader

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        leader = self._leader
        assert leader is not None
        leader._s.expire_if_late()
        leader._s.abort()  # type: ignore[union-attr]
        self._guard.exit(exc, leader._loss())
