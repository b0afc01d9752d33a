"""How gateways share agents by lease (app/gateway/fleet.py), in one process: two `Fleet`s over
the same agents' real lease tables (SQLite), each agent's service a recorder of starts and stops
(the real services run in tests/test_gateway_fleet.py, three processes and 30 bots)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.gateway.fleet import AgentSlot, Fleet
from app.gateway.server import GatewayError
from memory.store.agent_leases import GatewayProcess, SqliteAgentLeaseStore
from memory.store.db import open_database

LEASE_S, BEAT_S = 0.9, 0.1


class Recorder:
    """Stands in for an AgentService: records what the fleet did to it."""

    def __init__(self, settings: Any, log: list[tuple[str, str, str]], owner: str) -> None:
        self.name = settings.agent_id
        self.log = log
        self.owner = owner
        self.gateway: object | None = None
        self.health: dict[str, Any] = {}

    async def start(self) -> None:
        if self.name.startswith("bad"):
            raise GatewayError("No Telegram bot token: the token was refused")
        self.gateway = object()
        self.log.append((self.owner, "start", self.name))

    def cancel_turns(self) -> None:
        self.log.append((self.owner, "cancel", self.name))

    async def stop(self, grace_s: float) -> None:
        self.log.append((self.owner, f"stop {grace_s:g}", self.name))


class Named:
    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id


def fleet(tmp_path: Path, names: list[str], gateway: str, log: list[tuple[str, str, str]]) -> Fleet:
    slots = []
    for name in names:
        db = open_database(tmp_path / name / "agent.sqlite", vector_backend="numpy")
        slots.append(AgentSlot(Named(name), SqliteAgentLeaseStore(db), db.close))  # type: ignore[arg-type]
    make: Callable[[Any], Any] = lambda s: Recorder(s, log, gateway)  # noqa: E731
    return Fleet(
        slots,
        make,
        lease_s=LEASE_S,
        heartbeat_s=BEAT_S,
        grace_s=0.5,
        me=GatewayProcess(gateway, "this-host", 1),  # pid 1 is alive: only time frees a lease
    )


async def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.02)


def serving(f: Fleet) -> set[str]:
    return {s.name for s in f.served()}


AGENTS = [f"a{i}" for i in range(6)]


def test_two_gateways_share_the_agents_and_each_is_served_by_one(tmp_path: Path) -> None:
    async def scenario() -> None:
        log: list[tuple[str, str, str]] = []
        one, two = fleet(tmp_path, AGENTS, "gw-1", log), fleet(tmp_path, AGENTS, "gw-2", log)
        stop_one, stop_two = asyncio.Event(), asyncio.Event()
        runs = [asyncio.ensure_future(one.run(stop_one))]
        await until(lambda: len(serving(one)) == 6)  # alone, it serves every agent
        runs.append(asyncio.ensure_future(two.run(stop_two)))
        await until(lambda: len(serving(one)) == 3 and len(serving(two)) == 3)
        assert not serving(one) & serving(two)
        stop_one.set(), stop_two.set()
        await asyncio.gather(*runs)
        one.close(), two.close()
        # An agent handed over was stopped on one gateway before it started on the other.
        for name in AGENTS:
            events = [(who, what) for who, what, agent in log if agent == name]
            starts = [i for i, (_, what) in enumerate(events) if what == "start"]
            for i in starts[1:]:
                assert events[i - 1][1].startswith("stop"), events

    asyncio.run(scenario())


def test_a_gateway_whose_lease_was_taken_stops_that_agent_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        log: list[tuple[str, str, str]] = []
        one = fleet(tmp_path, ["a0"], "gw-1", log)
        stop = asyncio.Event()
        run = asyncio.ensure_future(one.run(stop))
        await until(lambda: serving(one) == {"a0"})
        thief = GatewayProcess("gw-2", "other-host", 2)
        leases = one.slots[0].leases
        # As if gw-1 had stalled for longer than the lease: another gateway took the agent.
        await asyncio.to_thread(leases.take, thief, time.time() + 60, LEASE_S, lambda _g: True)
        await until(lambda: not serving(one), timeout=2 * BEAT_S + 1)
        assert ("gw-1", "cancel", "a0") in log and ("gw-1", "stop 0", "a0") in log
        current = leases.current()
        assert current is not None and current.holder == thief  # never released: not its own
        stop.set()
        await run
        one.close()

    asyncio.run(scenario())


def test_an_agent_that_cannot_start_is_reported_and_the_others_run(tmp_path: Path) -> None:
    async def scenario() -> None:
        log: list[tuple[str, str, str]] = []
        one = fleet(tmp_path, ["a0", "bad1", "a2"], "gw-1", log)
        stop = asyncio.Event()
        run = asyncio.ensure_future(one.run(stop))
        await one.first_beat()
        await until(lambda: len(one.served()) == 3 and one.failed() != {})
        assert one.failed() == {"bad1": "No Telegram bot token: the token was refused"}
        health = one.health()
        assert health["bad1"].ok is False and health["a0"].error is None
        assert {a for _, what, a in log if what == "start"} == {"a0", "a2"}
        stop.set()
        await run
        one.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("holder_alive", [False, True])
def test_a_dead_gateways_agents_are_taken_over(tmp_path: Path, holder_alive: bool) -> None:
    """A holder on this host whose process is gone frees its agents at once; one elsewhere
    (alive as far as this host knows) frees them when its lease runs out."""

    async def scenario() -> None:
        log: list[tuple[str, str, str]] = []
        one = fleet(tmp_path, AGENTS[:2], "gw-1", log)
        dead = GatewayProcess("gw-0", "other-host" if holder_alive else "this-host", 999_999)
        for slot in one.slots:
            slot.leases.take(dead, time.time(), LEASE_S, lambda _g: True)
        stop = asyncio.Event()
        began = time.monotonic()
        run = asyncio.ensure_future(one.run(stop))
        await until(lambda: len(serving(one)) == 2)
        waited = time.monotonic() - began
        assert (waited >= LEASE_S * 0.8) if holder_alive else (waited < LEASE_S)
        stop.set()
        await run
        one.close()

    asyncio.run(scenario())


def test_a_heartbeat_too_long_for_the_lease_is_refused_with_advice() -> None:
    from pydantic import ValidationError

    from app.config import GatewayConfig

    assert GatewayConfig().agent_lease_s == 20 and GatewayConfig().agent_heartbeat_s == 5
    with pytest.raises(ValidationError, match="at most a quarter of agent_lease_s"):
        GatewayConfig(agent_lease_s=10, agent_heartbeat_s=5)
