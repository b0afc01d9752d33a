"""Which agents this `pinch gateway` process serves, when several processes share them: each agent
has a lease in its own database (memory/store/agent_leases.py); exactly one gateway holds it and
serves the agent (polls its bot token, runs its automations, its nightly dream, its page).

A keeper thread renews the leases held here every `agent_heartbeat_s`, whatever the event loop
is busy with (starting agents, a burst of messages). Every beat (the same interval) the loop:
- says this gateway is alive (`announce`, in the first agent's database: every gateway given the
  same agents meets there) and counts the live gateways, G; its fair share is ceil(agents / G);
- stops at once an agent whose lease the keeper found taken by another gateway, or could not
  renew for half of `agent_lease_s` (the database unreachable): channels, scheduler,
  running turns (their messages stay claimed; the new holder's gateway recovers them) — before
  any other gateway may take it;
- hands agents beyond its fair share back (stopped gracefully, then released), so a gateway
  that started first does not keep every agent;
- takes free agents (never taken, released, not renewed for `agent_lease_s`, or held by a
  process of this machine that is gone) up to its fair share, no more than a few ahead of those
  still starting — and any agent left free for two beats, whatever the share, so none stays
  unserved. A lease seen held by another live gateway is read again a beat later, not at
  every beat (beats follow each agent started: with a thousand agents, reading every other
  gateway's leases after each start made start-up grow with the square of the agents).
  Gateways try agents in an order of their own (a hash of gateway and agent), so they rarely
  reach for the same one at once.

An agent that cannot start (a refused token, a broken setting) is reported in the log and in
/healthz and keeps its lease here, tried again every `retry_s` (another gateway would fail the
same way); the others run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.gateway.agent_service import AgentService
from app.gateway.healthz import AgentHealth
from app.gateway.server import GatewayError
from memory.store.agent_leases import AgentLeaseStore, GatewayProcess
from memory.store.liveness import pid_alive

if TYPE_CHECKING:
    from app.config import Settings

log = logging.getLogger("pinch.gateway")

FENCE_SHARE = 1 / 2  # of agent_lease_s without a renewal: stop serving before anyone may take over
START_AT_ONCE = 2  # agents started together (building a runtime is mostly blocking work)
TAKE_AHEAD = 2 * START_AT_ONCE  # agents taken but not yet started, at most
RENEW_AT_ONCE = 8  # leases renewed in parallel by the keeper thread


def this_gateway() -> GatewayProcess:
    """This process as a lease holder (a fresh instance id for every start)."""
    return GatewayProcess(f"gw-{uuid.uuid4().hex[:12]}", socket.gethostname(), os.getpid())


def alive_for(me: GatewayProcess) -> Callable[[GatewayProcess], bool]:
    """Whether another gateway still runs, as far as this host can tell: a process of this host
    that is gone is dead; one elsewhere counts as alive (its lease then expires by time)."""

    def alive(other: GatewayProcess) -> bool:
        return not (other.host == me.host and not pid_alive(other.pid))

    return alive


@dataclass
class AgentSlot:
    """One agent this gateway may serve: its lease and, while held here, its service."""

    settings: Settings
    leases: AgentLeaseStore
    close: Callable[[], None]
    service: AgentService | None = None
    renewed_at: float = 0.0  # the last successful renewal (monotonic seconds)
    free_since: float | None = None  # when this gateway first saw the lease free
    seen_held_at: float = -math.inf  # when this gateway last saw another live holder's lease
    error: str | None = None  # why the agent could not start here
    failed_at: float = 0.0  # when it last failed to start (monotonic seconds)
    lost: bool = False  # the keeper found the lease taken by another gateway
    starting: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.settings.agent_id

    @property
    def held(self) -> bool:
        return self.service is not None


class Fleet:
    """The agents of one gateway process, served by lease (see the module's docstring)."""

    def __init__(
        self,
        slots: list[AgentSlot],
        make_service: Callable[[Settings], AgentService],
        *,
        lease_s: float,
        heartbeat_s: float,
        grace_s: float,
        me: GatewayProcess | None = None,
    ) -> None:
        if not slots:
            raise ValueError("a fleet needs at least one agent")
        self.slots = slots
        self.make_service = make_service
        self.lease_s = lease_s
        self.heartbeat_s = heartbeat_s
        self.grace_s = grace_s
        self.me = me or this_gateway()
        self.alive = alive_for(self.me)
        self.peers = 0  # other live gateways seen at the last beat
        self._ticked = asyncio.Event()
        self._wake = asyncio.Event()
        self._halt = threading.Event()
        self._starts = asyncio.Semaphore(START_AT_ONCE)

    @property
    def _level(self) -> int:
        """Lease events are news when agents are shared out (several, or several gateways)."""
        return logging.INFO if len(self.slots) > 1 or self.peers else logging.DEBUG

    # -- what runs here --------------------------------------------------------------------

    def served(self) -> list[AgentSlot]:
        return [s for s in self.slots if s.held]

    def failed(self) -> dict[str, str]:
        return {s.name: s.error for s in self.slots if s.error is not None}

    async def first_beat(self) -> None:
        """Wait for the first beat to have taken what it could, and those agents to start."""
        await self._ticked.wait()
        await self.started()

    # -- the loop --------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Beat until `stop` is set, then stop every agent served here (turns get `grace_s`)
        and release their leases."""
        loop = asyncio.get_running_loop()
        keeper = threading.Thread(
            target=self._keep, args=(loop,), name="pinch-agent-leases", daemon=True
        )
        keeper.start()
        try:
            while not stop.is_set():
                try:
                    await self.beat()
                except Exception as exc:  # a busy or unreachable database: try again next beat
                    log.warning("Could not share out the agents this beat: %s", exc)
                self._ticked.set()
                self._wake.clear()
                waits = [asyncio.ensure_future(e.wait()) for e in (stop, self._wake)]
                await asyncio.wait(waits, timeout=self.heartbeat_s, return_when="FIRST_COMPLETED")
                for waiting in waits:
                    waiting.cancel()
        finally:
            self._ticked.set()
            self._halt.set()
            for slot in self.slots:  # a start under way need not finish
                await self._abort_start(slot)
            await asyncio.gather(
                *(self._give_back(s, self.grace_s) for s in self.served()),
                return_exceptions=True,
            )
            keeper.join(timeout=self.heartbeat_s + 5)

    def _keep(self, loop: asyncio.AbstractEventLoop) -> None:
        """The keeper thread: renew every held lease each beat, whatever the event loop is busy
        with (starting agents, a burst of messages), several at once (one agent's database
        busy with a long write must not delay the others'); wake the loop when one was lost."""
        with ThreadPoolExecutor(RENEW_AT_ONCE, thread_name_prefix="pinch-renew") as pool:
            while not self._halt.wait(self.heartbeat_s):
                held = [s for s in self.slots if s.held and not s.lost]
                for slot, mine in zip(held, pool.map(self._renew, held), strict=True):
                    if mine is None:
                        continue
                    if mine:
                        slot.renewed_at = time.monotonic()
                    elif slot.held:
                        slot.lost = True
                        loop.call_soon_threadsafe(self._wake.set)

    def _renew(self, slot: AgentSlot) -> bool | None:
        try:
            return slot.leases.renew(self.me, time.time())
        except Exception as exc:  # fenced by the loop once it lasts too long
            log.warning("%s: could not renew the agent's lease: %s", slot.name, exc)
            return None

    async def beat(self) -> None:
        now = time.time()
        fair = await self._fair_share(now)
        for slot in self.served():
            stale = time.monotonic() - slot.renewed_at > self.lease_s * FENCE_SHARE
            if slot.lost or stale:
                why = "another gateway serves it now" if slot.lost else "it could not be renewed"
                log.warning("%s: lease lost (%s); stopping it here", slot.name, why)
                await self._stop_now(slot)
            elif slot.error is not None and time.monotonic() - slot.failed_at > self.retry_s:
                self._begin(slot)  # try again
        held = self.served()
        if self.peers and len(held) > fair:  # hand back the agents least "ours"
            extra = sorted(held, key=self._score)[: len(held) - fair]
            await asyncio.gather(*(self._give_back(s, self.grace_s) for s in extra))
        await self._take(fair, now)

    @property
    def retry_s(self) -> float:
        """How long an agent that failed to start waits before it is tried again."""
        return max(30.0, 3 * self.lease_s)

    async def _fair_share(self, now: float) -> int:
        rendezvous = self.slots[0].leases
        try:
            await asyncio.to_thread(rendezvous.announce, self.me, now)
            seen = await asyncio.to_thread(rendezvous.gateways, now - self.lease_s)
        except Exception as exc:
            log.warning("Could not reach the agents' lease table: %s", exc)
            seen = []
        others = {g.gateway for g in seen if g.gateway != self.me.gateway and self.alive(g)}
        self.peers = len(others)
        return math.ceil(len(self.slots) / (len(others) + 1))

    def _score(self, slot: AgentSlot) -> bytes:
        """This gateway's own order of the agents (highest-random-weight hashing)."""
        return hashlib.sha256(f"{self.me.gateway}/{slot.name}".encode()).digest()

    async def _take(self, fair: int, now: float) -> None:
        taken: list[AgentSlot] = []
        # No more than a few ahead of what is starting: a gateway takes agents as fast as it
        # can start them, so gateways that start together share them out.
        budget = TAKE_AHEAD - sum(1 for s in self.slots if s.starting and not s.starting.done())
        for slot in sorted(self.slots, key=self._score, reverse=True):
            if len(taken) >= budget:
                break
            if slot.held or time.monotonic() - slot.seen_held_at < self.heartbeat_s:
                continue  # held by another live gateway a moment ago: not read again yet
            try:
                current = await asyncio.to_thread(slot.leases.current)
            except Exception as exc:
                log.warning("%s: could not read the agent's lease: %s", slot.name, exc)
                continue
            free = current is None or (
                current.holder.gateway != self.me.gateway
                and (current.renewed_at <= now - self.lease_s or not self.alive(current.holder))
            )
            if not free:
                slot.free_since = None
                slot.seen_held_at = time.monotonic()
                continue
            slot.free_since = slot.free_since or time.monotonic()
            long_free = time.monotonic() - slot.free_since >= 2 * self.heartbeat_s
            if len(self.served()) + len(taken) >= fair and not long_free:
                continue
            lease = await asyncio.to_thread(
                slot.leases.take, self.me, time.time(), self.lease_s, self.alive
            )
            if lease is None:  # another gateway was quicker
                continue
            slot.free_since = None
            slot.renewed_at = time.monotonic()
            slot.lost = False
            log.log(self._level, "%s: lease taken (epoch %d)", slot.name, lease.epoch)
            taken.append(slot)
        # Started in the background: the beats go on renewing the other leases meanwhile.
        for slot in taken:
            self._begin(slot)

    def _begin(self, slot: AgentSlot) -> None:
        """Start serving `slot` in the background; held (and renewed) from now on."""
        service = slot.service = self.make_service(slot.settings)
        slot.starting = asyncio.ensure_future(self._start(slot, service))

    async def started(self) -> None:
        """Wait for the agents being started to be running (or to have failed)."""
        starting = [s.starting for s in self.slots if s.starting is not None]
        if starting:
            await asyncio.gather(*starting, return_exceptions=True)

    async def _start(self, slot: AgentSlot, service: AgentService) -> None:
        async with self._starts:  # a few at a time: the agents already running keep answering
            if slot.service is not service:  # given back or lost while waiting
                return
            try:
                await service.start()
                slot.error = None
            except Exception as exc:  # one bad agent never stops the others
                slot.error = (
                    str(exc) if isinstance(exc, GatewayError) else f"{type(exc).__name__}: {exc}"
                )
                slot.failed_at = time.monotonic()
                # Its task names the agent; one agent alone: the caller reports it.
                log.log(
                    logging.ERROR if len(self.slots) > 1 else logging.DEBUG,
                    "could not start: %s",
                    slot.error,
                )
            finally:
                self._wake.set()  # the next beat may take another agent now

    def cancel_turns(self) -> None:
        for slot in self.served():
            if slot.service is not None:
                slot.service.cancel_turns()

    def health(self) -> dict[str, AgentHealth]:
        """Each agent served here: its channels' health, or why it could not start."""
        return {
            s.name: AgentHealth(s.service.health if s.service else {}, s.error)
            for s in self.served()
        }

    async def _stop_now(self, slot: AgentSlot) -> None:
        """The lease is gone: stop at once (running turns cancelled, their messages stay
        claimed for the new holder); nothing is released (it is not ours)."""
        await self._abort_start(slot)
        service, slot.service = slot.service, None
        if service is not None:
            service.cancel_turns()
            with contextlib.suppress(Exception):
                await service.stop(0)

    async def _give_back(self, slot: AgentSlot, grace_s: float) -> None:
        """Stop serving `slot` (turns get `grace_s`), then release its lease."""
        await self._abort_start(slot)
        service, slot.service = slot.service, None
        if service is not None:
            try:
                await service.stop(grace_s)
            except Exception as exc:
                log.warning("%s: did not stop cleanly: %s", slot.name, exc)
        try:
            await asyncio.to_thread(slot.leases.release, self.me)
            log.log(self._level, "%s: lease released", slot.name)
        except Exception as exc:  # it expires on its own
            log.warning("%s: could not release the agent's lease: %s", slot.name, exc)

    @staticmethod
    async def _abort_start(slot: AgentSlot) -> None:
        """Cancel a start under way (it undoes what it started: no turn runs yet)."""
        if slot.starting is not None and not slot.starting.done():
            slot.starting.cancel()
            with contextlib.suppress(BaseException):
                await slot.starting

    def close(self) -> None:
        for slot in self.slots:
            with contextlib.suppress(Exception):
                slot.close()
