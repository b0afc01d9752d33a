"""The `schedule` tool: small, owner only, zone stated, jobs delivered to the chat that asked."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.policy import policy_for
from agent.tools import ToolContext
from app.automations.jobs import Jobs, Target
from app.automations.schedule_tool import current_target, schedule_spec, schedule_tool
from app.channel_registry import Owners
from bench.overhead import load_counters
from memory.store.db import open_database
from memory.store.jobs_store import SqliteJobStore
from memory.store.sessions import SessionKey

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
OWNER = SessionKey.owner_direct("telegram")


def make(tmp_path: Path) -> tuple[Jobs, object]:
    store = Jobs(SqliteJobStore(open_database(tmp_path / "agent.sqlite", vector_backend="numpy")))
    tool = schedule_tool(
        store, zone="Europe/Berlin", route=Owners.of({"telegram": ["111"]}).route, now=lambda: NOW
    )
    return store, tool


def call(tool: object, key: SessionKey, **args: object) -> str:
    ctx = ToolContext(key, "s1", policy_for(key))
    return asyncio.run(tool.run(ctx, args))  # type: ignore[attr-defined]


def test_the_whole_schema_costs_under_350_tokens_with_every_tokenizer() -> None:
    spec = schedule_spec("America/Argentina/Buenos_Aires")
    text = json.dumps(
        {"name": spec.name, "description": spec.description, "input_schema": spec.input_schema},
        ensure_ascii=False,
    )
    counts = {name: count(text) for name, count in load_counters().items()}
    assert max(counts.values()) < 350, counts


def test_the_description_says_which_zone_a_time_without_an_offset_means() -> None:
    assert "meaning Europe/Berlin without an offset" in schedule_spec("Europe/Berlin").description


def test_it_is_offered_to_the_owner_only_and_never_allowed_to_an_automation() -> None:
    assert policy_for(OWNER).allows("schedule")
    assert not policy_for(OWNER, "automation").allows("schedule")  # jobs can't create jobs
    group = SessionKey("main", "telegram", "group", "-100")
    assert not policy_for(group).offers("schedule")
    assert not policy_for(SessionKey("main", "telegram", "direct", "555"), "person").offers(
        "schedule"
    )


def test_a_reminder_is_confirmed_with_its_zone_and_goes_to_the_owners_chat(
    tmp_path: Path,
) -> None:
    store, tool = make(tmp_path)
    reply = call(
        tool, OWNER, action="create", text="check the train tickets", when="2026-12-02T09:00"
    )
    assert reply == (
        "Reminder #1 scheduled, once at Wed 2026-12-02 09:00 CET (Europe/Berlin); first run "
        "Wed 2026-12-02 09:00 CET (Europe/Berlin). Times are in Europe/Berlin."
    )
    [job] = store.jobs()
    assert job.target == Target("telegram", "111") and job.owner_private
    assert job.next_run_utc == datetime(2026, 12, 2, 8, tzinfo=UTC)


def test_a_weekday_task_is_stored_as_cron_in_the_owners_zone(tmp_path: Path) -> None:
    _, tool = make(tmp_path)
    reply = call(
        tool,
        OWNER,
        action="create",
        text="summarise my calendar notes",
        cron="30 8 * * 1-5",
        task=True,
    )
    assert reply.startswith('Task #1 scheduled, cron "30 8 * * 1-5" in Europe/Berlin')
    assert "Wed 2026-12-02 08:30 CET" in reply


def test_the_chat_the_gateway_is_answering_is_where_results_go(tmp_path: Path) -> None:
    store, tool = make(tmp_path)
    token = current_target.set(Target("slack", "D42", "171.2"))
    try:
        call(tool, OWNER, action="create", text="stretch", every="1h")
    finally:
        current_target.reset(token)
    assert store.jobs()[0].target == Target("slack", "D42", "171.2")


def test_list_and_cancel(tmp_path: Path) -> None:
    store, tool = make(tmp_path)
    call(tool, OWNER, action="create", text="water the plants", every="1d")
    assert "water the plants" in call(tool, OWNER, action="list")
    assert call(tool, OWNER, action="cancel", id=1).startswith("Cancelled job #1")
    assert store.get(1).state == "cancelled"  # type: ignore[union-attr]
    assert call(tool, OWNER, action="list") == "No scheduled jobs. (Times are in Europe/Berlin.)"


def test_a_time_in_the_past_is_refused_with_advice(tmp_path: Path) -> None:
    _, tool = make(tmp_path)
    try:
        call(tool, OWNER, action="create", text="x", when="2026-11-30T09:00")
    except Exception as exc:
        assert "in the past" in str(exc) and "Europe/Berlin" in str(exc)
    else:
        raise AssertionError("a past time was accepted")


def test_a_time_past_the_calendars_end_is_a_tool_error_not_a_crash(tmp_path: Path) -> None:
    from agent.tools import ToolFailure

    store, tool = make(tmp_path)
    for args in ({"when": "99999999999d"}, {"every": "99999999999d"}):
        with pytest.raises(ToolFailure, match="too far in the future"):
            call(tool, OWNER, action="create", text="x", **args)
    assert store.jobs() == []


def test_the_number_of_active_jobs_is_capped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model in a loop cannot fill the scheduler: past the cap, creating is a tool error
    saying what to do; cancelling one makes room again."""
    from agent.tools import ToolFailure
    from app.automations import jobs

    monkeypatch.setattr(jobs, "MAX_ACTIVE_JOBS", 3)
    store, tool = make(tmp_path)
    for i in range(3):
        call(tool, OWNER, action="create", text=f"job {i}", every="1d")
    with pytest.raises(ToolFailure, match=r"already 3 scheduled jobs.*pinch jobs cancel"):
        call(tool, OWNER, action="create", text="one too many", every="1d")
    assert len(store.jobs()) == 3
    call(tool, OWNER, action="cancel", id=1)
    assert "scheduled" in call(tool, OWNER, action="create", text="room again", every="1d")
