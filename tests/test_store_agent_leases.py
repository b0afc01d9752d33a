"""The agent lease (which gateway process serves an agent), tested through `AgentLeaseStore` on
both backends (`backend`: SQLite and PostgreSQL, tests/store_backends.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memory.store.agent_leases import (
    AgentLeaseStore,
    GatewayProcess,
    SqliteAgentLeaseStore,
)
from memory.store.postgres.agent_leases import PgAgentLeaseStore
from tests.store_backends import Backend, at_once

T0 = 1_000_000.0
LEASE_S = 15.0
A = GatewayProcess("gw-a", "host-1", 101)
B = GatewayProcess("gw-b", "host-1", 102)
C = GatewayProcess("gw-c", "host-2", 103)
STORES: dict[str, Callable[[Any], AgentLeaseStore]] = {
    "sqlite": SqliteAgentLeaseStore,
    "postgres": PgAgentLeaseStore,
}


def alive(_other: GatewayProcess) -> bool:
    return True


@pytest.fixture
def leases(backend: Backend) -> AgentLeaseStore:
    return STORES[backend.name](backend.db)


def test_a_free_lease_is_taken_and_then_refused_to_another_gateway(
    leases: AgentLeaseStore,
) -> None:
    assert leases.current() is None
    taken = leases.take(A, T0, LEASE_S, alive)
    assert taken is not None and taken.holder == A and taken.epoch == 1
    assert leases.take(B, T0 + 1, LEASE_S, alive) is None
    current = leases.current()
    assert current is not None and current.holder == A


def test_the_holder_renews_and_a_lease_not_renewed_for_lease_s_is_taken_over(
    leases: AgentLeaseStore,
) -> None:
    leases.take(A, T0, LEASE_S, alive)
    assert leases.renew(A, T0 + 10)
    assert leases.take(B, T0 + 20, LEASE_S, alive) is None  # renewed 10 s ago: still A's
    taken = leases.take(B, T0 + 26, LEASE_S, alive)
    assert taken is not None and taken.holder == B and taken.epoch == 2
    assert not leases.renew(A, T0 + 27)  # A learns it lost the agent


def test_a_dead_holder_loses_the_lease_at_once(leases: AgentLeaseStore) -> None:
    leases.take(A, T0, LEASE_S, alive)
    taken = leases.take(B, T0 + 1, LEASE_S, lambda other: other != A)
    assert taken is not None and taken.holder == B


def test_release_frees_the_lease_only_for_its_holder_and_epochs_keep_growing(
    leases: AgentLeaseStore,
) -> None:
    leases.take(A, T0, LEASE_S, alive)
    leases.release(B)
    assert leases.take(C, T0 + 1, LEASE_S, alive) is None
    leases.release(A)
    assert leases.current() is None
    again = leases.take(C, T0 + 2, LEASE_S, alive)
    assert again is not None and again.epoch == 2
    assert not leases.renew(A, T0 + 3)


def test_the_holder_taking_again_renews_without_a_new_epoch(leases: AgentLeaseStore) -> None:
    first = leases.take(A, T0, LEASE_S, alive)
    second = leases.take(A, T0 + 5, LEASE_S, alive)
    assert first is not None and second is not None
    assert (second.epoch, second.taken_at, second.renewed_at) == (1, T0, T0 + 5)


def test_of_gateways_taking_a_free_lease_at_once_exactly_one_gets_it(
    backend: Backend,
) -> None:
    stores = [STORES[backend.name](backend.reopen()) for _ in range(4)]
    gateways = [GatewayProcess(f"gw-{i}", "host-1", 200 + i) for i in range(4)]
    results = at_once(
        [
            lambda s=s, g=g: s.take(g, T0, LEASE_S, alive)  # type: ignore[misc]
            for s, g in zip(stores, gateways, strict=True)
        ]
    )
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    current = stores[0].current()
    assert current is not None and current.holder == winners[0].holder


def test_gateways_announced_recently_are_listed(leases: AgentLeaseStore) -> None:
    leases.announce(A, T0)
    leases.announce(B, T0 + 10)
    leases.announce(A, T0 + 12)  # replaces A's time
    assert leases.gateways(since=T0 + 5) == [A, B]
    assert leases.gateways(since=T0 + 11) == [A]


def test_pinch_migrate_leaves_the_lease_behind(tmp_path: Path) -> None:
    from memory.store.db import open_database
    from memory.store.transfer import transfer
    from memory.store.transfer_sqlite import open_sqlite_source, open_sqlite_target

    source_path, target_path = tmp_path / "agent.sqlite", tmp_path / "copy" / "agent.sqlite"
    db = open_database(source_path, vector_backend="numpy")
    leases = SqliteAgentLeaseStore(db)
    leases.announce(A, T0)
    assert leases.take(A, T0, LEASE_S, alive) is not None
    db.close()
    target_path.parent.mkdir()
    with open_sqlite_source(source_path) as source, open_sqlite_target(target_path) as target:
        report = transfer(source, target)
    assert {"agent_lease", "agent_lease_gateways"} <= set(report.derived)
    copy = open_database(target_path, vector_backend="numpy")
    try:
        assert SqliteAgentLeaseStore(copy).current() is None  # served by nobody yet
    finally:
        copy.close()
