"""`TurnSlots` (app/gateway/workers.py): several agents' session workers sharing one bound on
the turns a process runs at once (`[gateway] max_concurrent_turns_per_process`) — never more
than the bound at once, each session's batches in order, every batch run once, and a session
waiting for a slot claims nothing (its messages stay queued)."""

from __future__ import annotations

import asyncio
from collections import deque

from app.config import Settings
from app.gateway.queue import Batch
from app.gateway.workers import SessionWorkers, TurnSlots


class Agent:
    """One agent's queue: session -> its batches' turn ids, claimed in order."""

    def __init__(self, name: str, sessions: int, batches: int, slots: TurnSlots) -> None:
        self.queued = {
            f"{name}:{s}": deque(range(s * 100, s * 100 + batches)) for s in range(sessions)
        }
        self.claimed_while_full: list[int] = []
        self.ran: dict[str, list[int]] = {key: [] for key in self.queued}
        self.slots = slots
        self.workers = SessionWorkers(
            self.next_batch, self.run, collect_window_s=0, max_concurrent=4, shared=slots
        )

    def next_batch(self, key: str) -> Batch | None:
        if self.slots.running > self.slots.limit:
            self.claimed_while_full.append(len(self.queued[key]))
        queue = self.queued[key]
        return Batch(queue.popleft(), key, ()) if queue else None

    async def run(self, batch: Batch) -> bool:
        await asyncio.sleep(0.002)
        self.ran[batch.session_key].append(batch.turn_id)
        return True


def test_agents_sharing_a_bound_run_at_most_that_many_turns_in_order() -> None:
    async def scenario() -> list[Agent]:
        slots = TurnSlots(3)
        agents = [Agent(f"a{i}", sessions=4, batches=5, slots=slots) for i in range(4)]
        for agent in agents:
            for key in agent.queued:
                agent.workers.wake(key, collect=False)
        await asyncio.gather(*(agent.workers.idle() for agent in agents))
        assert slots.peak == 3  # 16 sessions wanted to run at once
        assert slots.running == 0 and slots.waiting == 0
        return agents

    for agent in asyncio.run(scenario()):
        assert agent.claimed_while_full == []
        for key, ran in agent.ran.items():
            first = int(key.rsplit(":", 1)[1]) * 100
            assert ran == list(range(first, first + 5))  # each once, in order


def test_the_default_bound_is_set_for_a_small_machine() -> None:
    assert Settings().gateway.max_concurrent_turns_per_process == 64
