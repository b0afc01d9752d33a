"""Scheduled tasks through a real Agent (the anthropic SDK against the scripted model server):
what a task's turn may see, that its transcript is kept, and that it cannot create jobs."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from app.automations.assembly import agent_turn
from app.automations.jobs import Jobs, NewJob, Schedule, Target
from app.automations.schedule_tool import schedule_tool
from app.automations.scheduler import Scheduler, task_session
from app.channel_registry import Owners
from channels.base import OutboundMessage
from memory.store.jobs_store import SqliteJobStore
from tests.agent_support import Kit, all_text, make_kit, template_workspace, tool_results
from tests.fakes.model_server import FakeModelServer, text_reply, tool_reply

SECRET = "The vault code is QX-7781."
T0 = datetime(2026, 12, 1, 7, tzinfo=UTC)


def kit_with_secret(tmp_path: Path, server: FakeModelServer) -> Kit:
    workspace = template_workspace(tmp_path, **{"MEMORY.md": f"# MEMORY.md\n- {SECRET}\n"})
    return make_kit(tmp_path, server, workspace=workspace)


def run_task(kit: Kit, *, private: bool) -> tuple[Jobs, int, list[OutboundMessage]]:
    store = Jobs(SqliteJobStore(kit.index.db))
    job = store.create(
        NewJob(
            Schedule("at", "x", "Europe/Berlin", T0 + timedelta(hours=1)),
            "task",
            "summarise my calendar notes",
            Target("telegram", "111"),
            "main:telegram:direct:owner",
            owner_private=private,
        ),
        T0,
    )
    sent: list[OutboundMessage] = []

    async def deliver(msg: OutboundMessage) -> None:
        sent.append(msg)

    scheduler = Scheduler(
        store,
        deliver=deliver,
        run_turn=agent_turn(kit.agent),
        now=lambda: T0 + timedelta(hours=1),
    )
    asyncio.run(scheduler.fire(job.id))
    return store, job.id, sent


def test_a_task_created_elsewhere_never_sees_memory_md(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = kit_with_secret(tmp_path, server)
        server.script(tool_reply("memory_get", {"path": "MEMORY.md"}), text_reply("Nothing."))
        _, _, sent = run_task(kit, private=False)
    assert [m.text for m in sent] == ["Nothing."]
    assert all("QX-7781" not in all_text(r) for r in server.requests)
    assert tool_results(server.requests[-1])[0]["is_error"]


def test_a_task_the_owner_created_in_their_private_chat_sees_their_memory(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = kit_with_secret(tmp_path, server)
        server.script(text_reply("Calendar: dentist at 10."))
        _, _, sent = run_task(kit, private=True)
    assert "QX-7781" in server.requests[0].system_text()
    assert "[automation" in all_text(server.requests[0])  # shown as an automation's words
    assert [m.text for m in sent] == ["Calendar: dentist at 10."]


def test_a_tasks_transcript_is_kept_in_its_own_session(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = kit_with_secret(tmp_path, server)
        server.script(text_reply("Calendar: dentist at 10."))
        store, job_id, _ = run_task(kit, private=True)
        job = store.get(job_id)
        assert job is not None
        session = kit.store.current(task_session(job, "main"))
        texts = [json.dumps(e.content) for e in kit.store.events(session.id)]
    assert any("summarise my calendar notes" in t for t in texts)
    assert any("Calendar: dentist at 10." in t for t in texts)


def test_a_tasks_turn_cannot_create_jobs(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = kit_with_secret(tmp_path, server)
        kit.agent.tools.add(
            schedule_tool(
                Jobs(SqliteJobStore(kit.index.db)),
                zone="Europe/Berlin",
                route=Owners.of({"telegram": ["111"]}).route,
                now=lambda: T0,
            )
        )
        server.script(
            tool_reply("schedule", {"action": "create", "text": "again", "every": "1m"}),
            text_reply("Done."),
        )
        store, _, _ = run_task(kit, private=True)
    assert tool_results(server.requests[-1])[0]["is_error"]
    assert len(store.jobs()) == 1  # only the task itself
