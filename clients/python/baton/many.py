"""Several names held together: all or none, in one order, so two
processes that want overlapping sets can never each hold a part and wait
for the other's.

Each name's claim can be shared: ``shared``/``limit`` apply to every name,
and ``per_name`` gives a name a kind of its own (a reader of one name, the
writer of another). The order keeps shared claims free of deadlock too:
whoever waits for a name holds only names before it, so a chain of waits
can only climb the order, and ends."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union, cast

from .core import LostEvent
from .errors import BadRequest, LockLost
from .held import Acquirer, AsyncHeld, CancelOnLoss, Held, claim_kind, release_leaving

__all__ = ["HeldMany", "AsyncHeldMany", "lock_many", "alock_many"]


PerName = Optional[Mapping[str, Mapping[str, Any]]]


def _order(names: Sequence[str]) -> List[str]:
    if isinstance(names, str):
        raise BadRequest("lock_many takes a list of names, not one string")
    order = sorted(set(names))
    if not order:
        raise BadRequest("lock_many needs at least one name")
    return order


def _kinds(order: List[str], shared: bool, limit: Optional[int], per_name: PerName) -> Dict[str, Dict[str, Any]]:
    """Each name's shared and limit keyword arguments: per_name's entry for
    it, or the general ones. A per_name entry for a name outside the set is
    refused: a misspelt name would silently change a claim's kind."""
    general = {"shared": shared, "limit": limit}
    claim_kind(shared, limit)
    kinds = {name: general for name in order}
    for name, kw in (per_name or {}).items():
        if name not in kinds:
            raise BadRequest(f"per_name names {name!r}, which is not in the set {order}")
        unknown = set(kw) - {"shared", "limit"}
        if unknown:
            raise BadRequest(f"per_name[{name!r}] has {sorted(unknown)}; it takes 'shared' and 'limit'")
        one = {"shared": kw.get("shared", False), "limit": kw.get("limit")}
        claim_kind(cast(bool, one["shared"]), one["limit"])  # a non-bool is refused there
        kinds[name] = one
    return kinds


class _Many:
    def __init__(self, locks: Sequence[Union[Held, AsyncHeld]]) -> None:
        self.locks = list(locks)
        # Each name's fencing token: pass them all to the guarded resources.
        self.tokens: Dict[str, int] = {h.name: h.token for h in self.locks}
        # Set when any one of the names is lost; is_set() reads the clock.
        self.lost = LostEvent(self._expire_if_late)
        for h in self.locks:
            h._s.on_loss(self.lost.set)

    def _expire_if_late(self) -> None:
        for h in self.locks:
            h._s.expire_if_late()

    @property
    def valid_until(self) -> float:
        """The earliest valid_until of the names (see Held.valid_until)."""
        return min(h.valid_until for h in self.locks)

    @property
    def cause(self) -> Optional[BaseException]:
        """Why the first lost name ended (None while all are held)."""
        for h in self.locks:
            if h.cause is not None:
                return h.cause
        return None

    def check(self) -> None:
        """Raises the LockLost of the first name lost, by the clock as
        Held.check() does."""
        for h in self.locks:
            h.check()

    def _first_loss(self) -> Optional[LockLost]:
        for h in self.locks:
            loss = h._loss()
            if loss is not None:
                return loss
        return None


class HeldMany(_Many):
    """Every name of a lock_many, held together. ``tokens`` maps each name to
    its fencing token."""

    def release(self) -> None:
        """Releases every name; raises the first LockLost if any was lost."""
        first: Optional[LockLost] = None
        for h in reversed(self.locks):
            try:
                h.release()  # type: ignore[union-attr]
            except LockLost as e:
                first = first or e
        if first is not None:
            raise first


class AsyncHeldMany(_Many):
    """The asyncio form of HeldMany."""

    async def release(self) -> None:
        first: Optional[LockLost] = None
        for h in reversed(self.locks):
            try:
                await h.release()  # type: ignore[misc]
            except LockLost as e:
                first = first or e
        if first is not None:
            raise first


def acquire_many(client: Acquirer, names: Sequence[str], timeout: Optional[float] = None,
                 max_hold: Optional[float] = None, *, shared: bool = False, limit: Optional[int] = None,
                 per_name: PerName = None) -> HeldMany:
    """Acquires every name, in sorted order; on any failure releases those it
    holds and raises. ``timeout`` bounds the whole; ``max_hold`` bounds each
    name's hold from its own grant; ``shared``, ``limit`` and ``per_name``
    give the claims' kinds (see the module's doc)."""
    order = _order(names)
    kinds = _kinds(order, shared, limit, per_name)
    deadline = None if timeout is None else time.monotonic() + timeout
    held: List[Held] = []
    try:
        for name in order:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            held.append(client.acquire(name, timeout=left, max_hold=max_hold, **kinds[name]))
    except BaseException:
        for h in reversed(held):
            try:
                h.release()
            except LockLost:
                pass  # the failure being raised says more
        raise
    return HeldMany(held)


async def aacquire_many(client: Acquirer, names: Sequence[str], timeout: Optional[float] = None,
                        max_hold: Optional[float] = None, *, shared: bool = False, limit: Optional[int] = None,
                        per_name: PerName = None) -> AsyncHeldMany:
    """The asyncio form of acquire_many."""
    order = _order(names)
    kinds = _kinds(order, shared, limit, per_name)
    deadline = None if timeout is None else time.monotonic() + timeout
    held: List[AsyncHeld] = []
    try:
        for name in order:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            held.append(await client.aacquire(name, timeout=left, max_hold=max_hold, **kinds[name]))
    except BaseException:
        for h in reversed(held):
            h._s.abort()  # type: ignore[union-attr]
        raise
    return AsyncHeldMany(held)


class lock_many:
    """``with client.lock_many(["a", "b"]) as many:`` holds every name for
    the block or none. Leaving the block releases them all and raises
    LockLost if any one was lost inside it."""

    def __init__(self, client: Acquirer, names: Sequence[str], timeout: Optional[float], max_hold: Optional[float],
                 *, shared: bool = False, limit: Optional[int] = None, per_name: PerName = None) -> None:
        _kinds(_order(names), shared, limit, per_name)
        self._args = (client, names, timeout, max_hold)
        self._kw: Dict[str, Any] = {"shared": shared, "limit": limit, "per_name": per_name}
        self._many: Optional[HeldMany] = None

    def __enter__(self) -> HeldMany:
        self._many = acquire_many(*self._args, **self._kw)
        return self._many

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._many is not None
        release_leaving(self._many.release, exc)


class alock_many:
    """``async with client.alock_many(["a", "b"]) as many:``: the task that
    runs the block is cancelled at once when any one name is lost, and
    LockLost comes out of the block."""

    def __init__(self, client: Acquirer, names: Sequence[str], timeout: Optional[float], max_hold: Optional[float],
                 *, shared: bool = False, limit: Optional[int] = None, per_name: PerName = None) -> None:
        _kinds(_order(names), shared, limit, per_name)
        self._args = (client, names, timeout, max_hold)
        self._kw: Dict[str, Any] = {"shared": shared, "limit": limit, "per_name": per_name}
        self._many: Optional[AsyncHeldMany] = None
        self._guard = CancelOnLoss()

    async def __aenter__(self) -> AsyncHeldMany:
        many = await aacquire_many(*self._args, **self._kw)
        self._many = many
        cancel = self._guard.watch()
        for h in many.locks:
            h._s.on_loss(cancel)
        return many

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        many = self._many
        assert many is not None
        many._expire_if_late()
        for h in many.locks:
            h._s.abort()  # type: ignore[union-attr]
        self._guard.exit(exc, many._first_loss())
