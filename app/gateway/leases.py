"""One turn per session across processes: `pinch chat` and `pinch gateway` share the owner's
main session, so a turn first takes the session's lease in the database (app/gateway/queue.py
`session_leases`; free when its holder's heartbeat is old or its process gone), keeps renewing
it while the turn runs, and releases it after. Polled: the other process cannot signal this one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from app.gateway.queue import GatewayStore, LeaseHolder

log = logging.getLogger("pinch.gateway")

LEASE_STALE_S = 30.0  # a session lease not renewed for this long is free (its holder hung)
LEASE_POLL_S = 0.5  # how often a turn waiting for another process's turn looks again


class SessionLeases:
    """The session leases of one gateway process. `waiting(key)` says whether a turn of `key`
    is still waiting for another process's turn (its Ctrl-C then gives up the wait)."""

    def __init__(
        self, store: GatewayStore, *, stale_s: float = LEASE_STALE_S, poll_s: float = LEASE_POLL_S
    ) -> None:
        self.store = store
        self.stale_s = stale_s
        self.poll_s = poll_s
        self._waiting: set[str] = set()

    def waiting(self, session_key: str) -> bool:
        return session_key in self._waiting

    async def acquire(
        self,
        session_key: str,
        me: LeaseHolder,
        *,
        given_up: Callable[[], bool],
        on_busy: Callable[[LeaseHolder], Awaitable[None]],
    ) -> bool:
        """Wait until no other process runs a turn of `session_key`, then hold its lease: True.
        `on_busy(other)` is awaited once, when another holder is found first; False when
        `given_up()` turned true while waiting."""
        told = False
        self._waiting.add(session_key)
        try:
            while not given_up():
                other = await asyncio.to_thread(
                    self.store.acquire_lease, session_key, me, self.stale_s
                )
                if other is None:
                    return True
                if not told:
                    told = True
                    await on_busy(other)
                await asyncio.sleep(self.poll_s)
            return False
        finally:
            self._waiting.discard(session_key)

    async def keep(self, session_key: str, me: LeaseHolder) -> None:
        """Renew the lease every third of its staleness, until cancelled."""
        while True:
            await asyncio.sleep(self.stale_s / 3)
            try:
                await asyncio.to_thread(self.store.renew_lease, session_key, me)
            except Exception as exc:
                log.warning("Could not renew the lease of %s: %s", session_key, exc)

    async def release(self, session_key: str, me: LeaseHolder) -> None:
        await asyncio.to_thread(self.store.release_lease, session_key, me)
