"""Several processes on one store (both backends): three claimer processes drain one inbound
queue while messages keep arriving; every message is claimed exactly once, and each session's
messages are answered in arrival order across the processes."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

from memory.store.postgres.queue import PgQueueStore
from memory.store.queue_store import QueueStore, SqliteQueueStore
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
