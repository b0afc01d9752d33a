"""Several processes on one store (both backends): three claimer processes drain one inbound
queue while messages keep arriving; every message is claimed exactly once, and each session's
messages are answered in arrival order across the processes; a process's running turn is
never taken by another's `recover` while it lives, and is taken over once it is killed."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

from memory.store.postgres.queue import PgQueueStore
from memory.store.queue_store import LeaseHolder, QueueStore, SqliteQueueStore
from tests.store_backends import Backend

ROOT = Path(__file__).resolve().parents[1]
SESSIONS = [f"main:telegram:direct:{n}" for n in range(8)]
MESSAGES = 240


def test_claimer_processes_take_each_message_once_and_in_session_order(
    backend: Backend, tmp_path: Path
) -> None:
    queue: QueueStore = (
        SqliteQueueStore(backend.db) if backend.name == "sqlite" else PgQueueStore(backend.db)
    )
    where = backend.location
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    claimers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.store_claimer", backend.name, where],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    accepted: dict[str, list[int]] = {key: [] for key in SESSIONS}
    for n in range(MESSAGES):  # arriving while the claimers run
        key = SESSIONS[n % len(SESSIONS)]
        queue_id = queue.accept("telegram", f"m{n}", key, "owner", f'"{n}"', time.time())
        assert queue_id is not None
        accepted[key].append(queue_id)
        if n % 40 == 0:
            time.sleep(0.02)
    outputs = [c.communicate(timeout=120) for c in claimers]

    assert all(c.returncode == 0 for c in claimers), [err for _, err in outputs]
    turns = [line.split() for out, _ in outputs for line in out.splitlines()]
    claimed = [int(i) for turn in turns for i in turn[1:]]
    assert sorted(claimed) == sorted(i for ids in accepted.values() for i in ids)  # once each
    assert queue.counts() == {"done": MESSAGES}
    by_session: dict[str, list[list[int]]] = {key: [] for key in SESSIONS}
    for turn in turns:  # a turn is one session's messages in arrival order
        ids = [int(i) for i in turn[1:]]
        assert ids == sorted(ids) and set(ids) <= set(accepted[turn[0]])
        by_session[turn[0]].append(ids)
    for key, session_turns in by_session.items():  # turns never interleave: arrival order kept
        ordered = sorted(session_turns)
        assert all(a[-1] < b[0] for a, b in itertools.pairwise(ordered)), key


def test_recover_leaves_a_live_processs_turn_and_takes_a_killed_ones(backend: Backend) -> None:
    """Two processes on one store: a gateway starting (`recover`) while another runs a turn
    does not steal it; once that process is killed, its turn is taken over — at once when its
    pid is known dead on this host, else when its heartbeat is older than `stale_s`."""
    queue: QueueStore = (
        SqliteQueueStore(backend.db) if backend.name == "sqlite" else PgQueueStore(backend.db)
    )
    key = SESSIONS[0]
    for n in range(2):
        queue.accept("telegram", f"h{n}", key, "owner", f'"{n}"', time.time())
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.store_holder", backend.name, backend.location, key],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        _, turn_id, name = holder.stdout.readline().split()

        def pid_alive(other: LeaseHolder) -> bool:
            return holder.poll() is None if other.holder == name else True

        assert queue.recover("me", now=time.time(), alive=pid_alive) == 0  # it lives
        assert queue.recover("me", now=time.time() + 5, stale_s=30) == 0  # beats are fresh
        assert queue.claim_next(key, "me") is None  # nothing to claim: its turn runs there
    finally:
        holder.kill()
        holder.wait()

    assert queue.recover("me", now=time.time(), alive=pid_alive) == 2  # its pid is gone
    again = queue.claim_next(key, "me")
    assert again is not None and again.resumed and again.turn_id == int(turn_id)
    assert queue.recover("me", now=time.time() + 3600) == 0  # never this process's own claim


def test_a_silent_process_on_another_host_loses_its_claim_after_stale_s(backend: Backend) -> None:
    queue: QueueStore = (
        SqliteQueueStore(backend.db) if backend.name == "sqlite" else PgQueueStore(backend.db)
    )
    other: QueueStore = (
        SqliteQueueStore(backend.reopen())
        if backend.name == "sqlite"
        else PgQueueStore(backend.reopen())
    )
    key = SESSIONS[1]
    queue.accept("telegram", "x1", key, "owner", '"x"', 1000.0)
    elsewhere = LeaseHolder("far-away", 4242, "other-host", "telegram")
    other.beat(elsewhere, 1000.0)
    assert other.claim_next(key, elsewhere.holder) is not None

    assert queue.recover("me", now=1020.0, stale_s=30) == 0
    assert queue.recover("me", now=1031.0, stale_s=30) == 1
