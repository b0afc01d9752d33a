"""The gateway's and automations' repositories, tested through their Protocols (PairingStore,
QueueStore, JobStore), on both backends (`backend`: SQLite and PostgreSQL,
tests/store_backends.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memory.store.jobs_store import (
    JobStore,
    NewJob,
    Schedule,
    SqliteJobStore,
    Target,
    TooManyJobs,
)
from memory.store.pairing_store import PairingStore, SqlitePairingStore
from memory.store.postgres.jobs import PgJobStore
from memory.store.postgres.pairing import PgPairingStore
from memory.store.postgres.queue import PgQueueStore
from memory.store.queue_store import Delivery, LeaseHolder, QueueStore, SqliteQueueStore
from tests.store_backends import Backend, at_once

T0 = 1_000_000.0
NOW = datetime(2026, 12, 1, 9, tzinfo=UTC)

PAIRING: dict[str, Callable[[Any], PairingStore]] = {
    "sqlite": SqlitePairingStore,
    "postgres": PgPairingStore,
}
QUEUES: dict[str, Callable[..., QueueStore]] = {
    "sqlite": SqliteQueueStore,
    "postgres": PgQueueStore,
}
JOBS: dict[str, Callable[[Any], JobStore]] = {"sqlite": SqliteJobStore, "postgres": PgJobStore}


@pytest.fixture
def pairing(backend: Backend) -> PairingStore:
    return PAIRING[backend.name](backend.db)


@pytest.fixture
def queue(backend: Backend) -> QueueStore:
    return QUEUES[backend.name](backend.db)


@pytest.fixture
def terminal_queue(backend: Backend) -> QueueStore:
    return QUEUES[backend.name](backend.db, claimant="cli-1")


@pytest.fixture
def jobs(backend: Backend) -> JobStore:
    return JOBS[backend.name](backend.db)


# -- pairing ----------------------------------------------------------------------------------


def request(store: PairingStore, sender: str, code: str, now: float = T0) -> object:
    return store.create_request("telegram", sender, None, code, now, ttl_s=3600, max_pending=3)


def test_a_channel_never_has_more_pending_codes_than_allowed(pairing: PairingStore) -> None:
    made = [request(pairing, str(i), f"CODE{i}") for i in range(4)]

    assert [m is not None for m in made] == [True, True, True, False]
    assert [r.code for r in pairing.pending(T0)] == ["CODE0", "CODE1", "CODE2"]


def test_the_pending_cap_holds_when_requests_come_at_once(backend: Backend) -> None:
    stores = [PAIRING[backend.name](backend.reopen()) for _ in range(6)]

    made = at_once([lambda s=s, i=i: request(s, str(i), f"C{i}") for i, s in enumerate(stores)])

    assert sum(m is not None for m in made) == 3
    assert len(stores[0].pending(T0)) == 3


def test_an_expired_code_is_gone_and_frees_its_place(pairing: PairingStore) -> None:
    for i in range(3):
        request(pairing, str(i), f"OLD{i}")

    assert pairing.pending(T0 + 3600) == []
    assert pairing.latest("telegram", "0", T0 + 3600) is None
    assert request(pairing, "9", "NEW", now=T0 + 3600) is not None


def test_a_code_is_decided_once(pairing: PairingStore) -> None:
    request(pairing, "555", "ABCD")

    approved = pairing.decide("ABCD", approve=True, now=T0 + 1)

    assert approved is not None and approved.state == "approved"
    assert pairing.decide("ABCD", approve=False, now=T0 + 2) is None
    assert pairing.is_approved("telegram", "555")
    assert [(a.channel, a.sender_id) for a in pairing.approved()] == [("telegram", "555")]


def test_a_rejected_code_approves_nobody(pairing: PairingStore) -> None:
    request(pairing, "555", "ABCD")

    rejected = pairing.decide("ABCD", approve=False, now=T0 + 1)

    assert rejected is not None and rejected.state == "rejected"
    assert not pairing.is_approved("telegram", "555")
    latest = pairing.latest("telegram", "555", T0 + 2)
    assert latest is not None and latest.state == "rejected"


def test_an_approval_is_unique_per_sender_and_can_be_revoked(pairing: PairingStore) -> None:
    for code in ("AAAA", "BBBB"):
        request(pairing, "555", code)
        pairing.decide(code, approve=True, now=T0 + 1)

    assert len(pairing.approved()) == 1
    assert pairing.revoke("telegram", "555") is True
    assert pairing.revoke("telegram", "555") is False
    assert not pairing.is_approved("telegram", "555")


# -- queue ------------------------------------------------------------------------------------


def accept(store: QueueStore, key: str, dedup: str, session: str = "s1") -> int | None:
    return store.accept("telegram", key + ":" + dedup, session, "owner", f'"{dedup}"', T0)


def test_a_platform_message_is_accepted_once(queue: QueueStore) -> None:
    assert accept(queue, "42", "1") is not None
    assert accept(queue, "42", "1") is None
    assert queue.first_sight("telegram", "42:1", T0) is False
    assert queue.first_sight("telegram", "42:2", T0) is True
    assert accept(queue, "42", "2") is None  # seen by first_sight


def test_queue_ids_and_sessions_follow_arrival_order(queue: QueueStore) -> None:
    first = accept(queue, "a", "1", session="s2")
    second = accept(queue, "b", "1", session="s1")
    third = accept(queue, "c", "1", session="s2")

    assert first is not None and second is not None and third is not None
    assert first < second < third
    assert queue.pending_sessions() == ["s2", "s1"]
    claimed = queue.claim_next("s2")
    assert claimed is not None
    assert [m.id for m in claimed.messages] == [first, third]
    assert [m.message_json for m in claimed.messages] == ['"1"', '"1"']


def test_a_queued_message_is_claimed_exactly_once(backend: Backend) -> None:
    dbs = [backend.db, backend.db, backend.reopen(), backend.reopen()]  # threads and processes
    stores = [QUEUES[backend.name](db) for db in dbs]
    for i in range(20):
        accept(stores[0], "k", str(i))
    claimed: list[int] = []
    lock = threading.Lock()

    def claim(store: QueueStore) -> None:
        while (turn := store.claim_next("s1")) is not None:
            with lock:
                claimed.extend(m.id for m in turn.messages)

    threads = [threading.Thread(target=claim, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted(claimed) == sorted(set(claimed)) and len(claimed) == 20
    assert not stores[0].has_queued("s1")


def test_an_interrupted_turn_is_claimed_again_with_its_grouping(queue: QueueStore) -> None:
    accept(queue, "k", "1")
    accept(queue, "k", "2")
    first = queue.claim_next("s1")
    accept(queue, "k", "3")

    assert queue.recover() == 2
    again = queue.claim_next("s1")
    rest = queue.claim_next("s1")

    assert first is not None and again is not None and rest is not None
    assert again.resumed and again.turn_id == first.turn_id
    assert [m.id for m in again.messages] == [m.id for m in first.messages]
    assert not rest.resumed and len(rest.messages) == 1


def test_a_claimant_claims_only_its_own_messages(
    queue: QueueStore, terminal_queue: QueueStore
) -> None:
    accept(terminal_queue, "cli", "1")

    assert queue.claim_next("s1") is None
    assert queue.pending_sessions() == []
    assert terminal_queue.claim_next("s1") is not None


def test_deliveries_are_kept_by_part_and_finished_with_the_turn(queue: QueueStore) -> None:
    accept(queue, "k", "1")
    turn = queue.claim_next("s1")
    assert turn is not None
    queue.record_delivery(turn.turn_id, 1, Delivery("telegram", "42", "m2", None), T0)
    queue.record_delivery(turn.turn_id, 0, Delivery("telegram", "42", "m1", None), T0)
    queue.record_delivery(turn.turn_id, 0, Delivery("telegram", "42", "m1b", None), T0)

    queue.finish(turn.turn_id, T0)

    assert [d.message_id for d in queue.deliveries(turn.turn_id)] == ["m1b", "m2"]
    assert queue.counts() == {"done": 1}
    queue.prune(T0 + 1)
    assert queue.counts() == {} and queue.deliveries(turn.turn_id) == []
    assert accept(queue, "k", "1") is not None  # the de-duplication record was pruned too


def test_of_processes_taking_a_lease_at_once_one_holds_it(backend: Backend) -> None:
    stores = [QUEUES[backend.name](backend.reopen()) for _ in range(4)]
    holders = [LeaseHolder(f"p{i}", i, "host", "telegram") for i in range(4)]

    others = at_once(
        [
            lambda s=s, h=h: s.acquire_lease("s1", h, T0, 30, alive=lambda _: True)
            for s, h in zip(stores, holders, strict=True)
        ]
    )

    assert sum(o is None for o in others) == 1
    winner = holders[others.index(None)]
    assert all(o == winner for o in others if o is not None)


def test_a_session_lease_has_one_holder(queue: QueueStore) -> None:
    a = LeaseHolder("a", 1, "host", "telegram")
    b = LeaseHolder("b", 2, "host", "cli")

    assert queue.acquire_lease("s1", a, T0, 30, alive=lambda _: True) is None
    assert queue.acquire_lease("s1", b, T0 + 1, 30, alive=lambda _: True) == a
    assert queue.acquire_lease("s1", b, T0 + 1, 30, alive=lambda _: False) is None  # a is gone
    queue.release_lease("s1", b)
    assert queue.acquire_lease("s1", a, T0 + 2, 30, alive=lambda _: True) is None
    queue.renew_lease("s1", a, T0 + 100)
    assert queue.acquire_lease("s1", b, T0 + 110, 30, alive=lambda _: True) == a
    assert queue.acquire_lease("s1", b, T0 + 131, 30, alive=lambda _: True) is None  # stale


# -- jobs -------------------------------------------------------------------------------------


def new_job(managed: str | None = None, kind: str = "every") -> NewJob:
    return NewJob(
        Schedule(kind, "300", "Europe/Berlin", NOW),  # type: ignore[arg-type]
        "reminder",
        "stretch",
        Target("telegram", "42"),
        "main:telegram:direct:owner",
        owner_private=True,
        managed=managed,
    )


def test_jobs_keep_their_fields_and_creation_order(jobs: JobStore) -> None:
    first = jobs.insert(new_job(), first_run=NOW, now=NOW, max_active=None)
    second = jobs.insert(new_job(), first_run=NOW, now=NOW, max_active=None)

    assert first.id < second.id
    assert first.state == "active" and first.next_run_utc == NOW
    assert first.schedule == new_job().schedule and first.target == Target("telegram", "42")
    assert [j.id for j in jobs.jobs()] == [first.id, second.id]
    assert jobs.get(first.id) == first


def test_the_active_job_limit_is_checked_with_the_insert(jobs: JobStore) -> None:
    jobs.insert(new_job(), first_run=NOW, now=NOW, max_active=2)
    jobs.insert(new_job(), first_run=NOW, now=NOW, max_active=2)

    with pytest.raises(TooManyJobs) as info:
        jobs.insert(new_job(), first_run=NOW, now=NOW, max_active=2)
    assert info.value.active == 2
    jobs.insert(new_job(managed="heartbeat"), first_run=NOW, now=NOW, max_active=None)
    assert len(jobs.jobs()) == 3


def test_a_managed_name_is_unique(jobs: JobStore) -> None:
    jobs.insert(new_job(managed="heartbeat"), first_run=NOW, now=NOW, max_active=None)

    with pytest.raises(Exception):  # noqa: B017 - each database raises its own integrity error
        jobs.insert(new_job(managed="heartbeat"), first_run=NOW, now=NOW, max_active=None)
    managed = jobs.get_managed("heartbeat")
    assert managed is not None
    jobs.cancel_managed("heartbeat")
    assert jobs.jobs(states=("cancelled",)) == [jobs.get(managed.id)]


def test_a_run_is_claimed_exactly_once(jobs: JobStore) -> None:
    job = jobs.insert(new_job(), first_run=NOW, now=NOW, max_active=None)
    later = NOW + timedelta(minutes=5)

    run_id = jobs.claim(job.id, NOW, later, NOW, run_for=NOW)
    again = jobs.claim(job.id, NOW, later, NOW, run_for=NOW)

    assert run_id is not None and again is None
    fresh = jobs.get(job.id)
    assert fresh is not None and fresh.next_run_utc == later
    [run] = jobs.runs(job.id)
    assert (run.id, run.status, run.scheduled_for) == (run_id, "running", NOW)


def test_of_schedulers_claiming_at_once_exactly_one_gets_the_run(backend: Backend) -> None:
    job = JOBS[backend.name](backend.db).insert(new_job(), first_run=NOW, now=NOW, max_active=None)
    stores = [JOBS[backend.name](backend.reopen()) for _ in range(4)]
    later = NOW + timedelta(minutes=5)

    got = at_once([lambda s=s: s.claim(job.id, NOW, later, NOW, run_for=NOW) for s in stores])

    assert sum(g is not None for g in got) == 1
    assert len(stores[0].runs(job.id)) == 1


def test_the_job_cap_holds_when_inserts_come_at_once(backend: Backend) -> None:
    stores = [JOBS[backend.name](backend.reopen()) for _ in range(5)]

    def insert(store: JobStore) -> bool:
        try:
            store.insert(new_job(), first_run=NOW, now=NOW, max_active=2)
        except TooManyJobs:
            return False
        return True

    assert sum(at_once([lambda s=s: insert(s) for s in stores])) == 2


def test_a_paused_job_is_not_claimed(jobs: JobStore) -> None:
    job = jobs.insert(new_job(), first_run=NOW, now=NOW, max_active=None)
    jobs.update_schedule(job.id, "paused", NOW, NOW)

    assert jobs.claim(job.id, NOW, None, NOW, run_for=NOW) is None


def test_completing_a_run_resets_failures_and_ends_a_one_shot(jobs: JobStore) -> None:
    job = jobs.insert(new_job(kind="at"), first_run=NOW, now=NOW, max_active=None)
    jobs.record_failure(job.id, 2, NOW + timedelta(seconds=60), disable=False)
    failed = jobs.get(job.id)
    assert failed is not None and failed.consecutive_failures == 2
    assert failed.next_run_utc == NOW + timedelta(seconds=60)
    run_id = jobs.claim(job.id, NOW + timedelta(seconds=60), None, NOW, run_for=NOW)
    assert run_id is not None

    jobs.complete_run(run_id, job.id, "ok", NOW, 0.0, None, done=True)

    done = jobs.get(job.id)
    assert done is not None and (done.state, done.consecutive_failures) == ("done", 0)
    assert done.backoff_until is None
    assert [r.status for r in jobs.runs(job.id)] == ["ok"]


def test_failures_disable_an_active_job(jobs: JobStore) -> None:
    job = jobs.insert(new_job(), first_run=NOW, now=NOW, max_active=None)

    jobs.record_failure(job.id, 10, NOW, disable=True)

    disabled = jobs.get(job.id)
    assert disabled is not None and disabled.state == "disabled"


def test_ended_jobs_stay_ended(jobs: JobStore) -> None:
    job = jobs.insert(new_job(), first_run=NOW, now=NOW, max_active=None)
    jobs.mark_done(job.id)

    jobs.run_now(job.id, NOW + timedelta(hours=1))
    jobs.release(job.id, NOW + timedelta(hours=1))

    ended = jobs.get(job.id)
    assert ended is not None and ended.state == "done" and ended.next_run_utc == NOW


def test_on_a_shared_database_only_runs_older_than_a_run_may_take_are_closed(
    jobs: JobStore,
) -> None:
    old = jobs.insert(new_job(), first_run=NOW, now=NOW, max_active=None)
    young = jobs.insert(new_job(), first_run=NOW, now=NOW, max_active=None)
    jobs.claim(old.id, NOW, None, NOW, run_for=NOW)
    jobs.claim(young.id, NOW, None, NOW + timedelta(minutes=9), run_for=NOW)

    later = NOW + timedelta(minutes=11)
    assert jobs.close_interrupted_runs(later, later - timedelta(minutes=10)) == 1
    assert [r.status for r in jobs.runs(young.id)] == ["running"]  # another scheduler's, live
    assert [r.status for r in jobs.runs(old.id)] == ["cancelled"]


def test_runs_left_running_are_closed_as_interrupted(jobs: JobStore) -> None:
    job = jobs.insert(new_job(), first_run=NOW, now=NOW, max_active=None)
    jobs.claim(job.id, NOW, None, NOW, run_for=NOW)

    assert jobs.close_interrupted_runs(NOW) == 1
    [run] = jobs.runs()
    assert run.status == "cancelled" and run.note and "interrupted" in run.note


def test_prune_forgets_the_heartbeats_of_processes_long_silent(backend: Backend) -> None:
    queue = QUEUES[backend.name](backend.db)
    gone, alive = LeaseHolder("gone", 1, "h", ""), LeaseHolder("alive", 2, "h", "")
    queue.beat(gone, T0)
    queue.beat(alive, T0 + 600)
    accept(queue, "k", "1")
    assert queue.claim_next("s1", "alive") is not None

    queue.prune(T0 + 300)

    # the live process's claim is still its own; the silent one is forgotten
    assert queue.recover("me", now=T0 + 610, stale_s=30) == 0
