"""start_automations over a built runtime: the schedule tool, the managed heartbeat, a real
agent turn delivered through the real Telegram adapter."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.automations.assembly import build_automations, start_automations
from app.automations.jobs import Jobs
from app.cli.main import TEMPLATE_DIR
from app.cli.setup import initialise
from app.config import Settings
from app.wiring import build_runtime
from tests.fakes.model_server import FakeModelServer, text_reply
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram_support import running


@pytest.fixture
def settings(pinch_home: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    return Settings(
        home=pinch_home,
        agent={"model": "claude-test", "max_retries": 0, "timezone": "Europe/Berlin"},
        memory={"embedding": {"provider": "none"}},
        owners={"telegram": ["111"]},
        heartbeat={"every": "30m", "active_hours": None},
    )


def test_the_heartbeat_runs_a_turn_and_delivers_to_the_owner_on_telegram(
    settings: Settings, tmp_path: Path
) -> None:
    initialise(settings, TEMPLATE_DIR)

    async def scenario(model_url: str, tg: FakeTelegram) -> list[str]:
        configured = settings.model_copy(
            update={"agent": settings.agent.model_copy(update={"api_base": model_url})}
        )
        async with (
            await build_runtime(configured) as runtime,
            running(tg, tmp_path) as (
                channel,
                _,
            ),
        ):
            assert any(s.name == "schedule" for s in runtime.agent.tools.specs)
            ids = []
            for _ in range(2):  # a restart keeps one heartbeat job
                scheduler = await start_automations(runtime, {"telegram": channel})
                assert scheduler is not None
                ids.append(sorted(scheduler.armed_ids))
                await scheduler.stop()
            # the heartbeat and the resync timer, once each after a restart (the nightly dream has
            # a timer of its own: tests/test_scheduler_dream.py)
            assert ids[0] == ids[1] == ["pinch-job-1", "pinch-resync"]
            scheduler = await start_automations(runtime, {"telegram": channel})
            assert scheduler is not None
            [job] = scheduler.store.jobs()
            assert job.managed == "heartbeat" and job.schedule.spec == "1800"
            scheduler.store.run_now(job.id, datetime.now(UTC))
            await scheduler.fire(job.id)
            await scheduler.stop()
        return [m.text for m in tg.sent]

    with FakeModelServer(api_key="test-key") as server, FakeTelegram() as tg:
        server.script(text_reply("An invoice in inbox/ is due today."))
        sent = asyncio.run(scenario(server.url, tg))
        [call] = tg.calls_to("sendMessage")
    assert sent == ["An invoice in inbox/ is due today."]
    assert str(call.params["chat_id"]) == "111"
    assert "Open TODOs" in server.requests[0].last_user_text()  # HEARTBEAT.md's checklist


def add_schedule_tool(runtime: Any) -> Jobs:
    """What the composition root does for a runtime with automations on: build them and offer
    the `schedule` tool (for runtimes the tests assemble themselves)."""
    automations = build_automations(runtime.settings, runtime.index.db, runtime.clock)
    runtime.automations = automations
    runtime.agent.tools.add(automations.tool)
    return automations.jobs


def test_a_machine_zone_without_an_iana_name_falls_back_to_utc_for_jobs() -> None:
    from types import SimpleNamespace

    from app.automations.assembly import owner_zone

    def clock(name: str) -> Any:
        return SimpleNamespace(zone_name=name)

    assert owner_zone(clock("Europe/Berlin")) == "Europe/Berlin"
    assert owner_zone(clock("XYZT")) == "UTC"


def test_a_reminder_asked_for_in_a_slack_dm_is_delivered_to_that_dm(tmp_path: Path) -> None:
    from app.automations.jobs import Target
    from tests.fakes.model_server import tool_reply
    from tests.gateway_support import OWNER_SLACK, make_rig

    async def scenario(server: FakeModelServer) -> list[str]:
        rig = make_rig(tmp_path, server)
        store = add_schedule_tool(rig.gateway.runtime)
        await rig.gateway.start()
        await rig.slack.deliver(OWNER_SLACK, "remind me in 20 minutes to stretch", chat_id="D9")
        await rig.gateway.idle()
        [job] = store.jobs()
        assert job.target == Target("slack", "D9")  # the chat that asked, not a guess
        scheduler = await start_automations(rig.gateway.runtime, rig.gateway.channels)
        assert scheduler is not None
        store.run_now(job.id, datetime.now(UTC))
        await scheduler.fire(job.id)
        await scheduler.stop()
        await rig.close()
        return rig.slack.texts("D9")

    with FakeModelServer() as server:
        server.script(
            tool_reply("schedule", {"action": "create", "text": "Stretch!", "when": "20m"}),
            text_reply("Reminder set."),
        )
        texts = asyncio.run(scenario(server))
    assert texts[-1] == "Stretch!"
    assert "Reminder set." in texts


def _terminal_scenario(
    tmp_path: Path, server: FakeModelServer, owners: dict[str, list[str]]
) -> Any:
    """`pinch chat` asks for a reminder (the terminal turn through the gateway machinery), then
    `pinch gateway`'s scheduler (Telegram and Slack running, no terminal) runs it."""
    from app.config import OwnersConfig
    from tests.gateway_support import make_rig
    from tests.test_cli_channel import ScriptedIO, chat_gateway

    async def scenario() -> tuple[list[Any], list[str], list[Any]]:
        rig = make_rig(tmp_path, server)
        runtime = rig.gateway.runtime
        runtime.settings = runtime.settings.model_copy(update={"owners": OwnersConfig(**owners)})
        store = add_schedule_tool(runtime)
        io = ScriptedIO()
        chat, channel = chat_gateway(runtime, io)
        await chat.start()
        await io.lines.put("remind me in 20 minutes to stretch")
        await io.until(lambda: bool(io.outcomes))
        await io.lines.put(None)
        await channel.finished()
        await chat.stop(5)
        runs: list[Any] = []
        await rig.gateway.start()
        for job in store.jobs():
            scheduler = await start_automations(runtime, rig.gateway.channels)
            assert scheduler is not None
            store.run_now(job.id, datetime.now(UTC))
            await scheduler.fire(job.id)
            await scheduler.stop()
            runs = store.runs(job.id)
        await rig.close()
        return io.outcomes, rig.telegram.texts("111"), runs

    return asyncio.run(scenario())


def test_a_reminder_asked_for_in_the_terminal_reaches_the_owner_on_telegram(
    tmp_path: Path,
) -> None:
    from tests.fakes.model_server import tool_reply

    with FakeModelServer() as server:
        server.script(
            tool_reply("schedule", {"action": "create", "text": "Stretch!", "when": "20m"}),
            text_reply("Reminder set."),
        )
        outcomes, telegram, runs = _terminal_scenario(tmp_path, server, {"telegram": ["111"]})
        confirmation = str(server.requests[1].body["messages"][-1]["content"])
    assert "It will be sent to your Telegram chat" in confirmation
    assert outcomes[0].text == "Reminder set."
    assert telegram == ["Stretch!"]
    assert [r.status for r in runs] == ["ok"]


def test_a_reminder_asked_for_in_the_terminal_with_no_owner_id_is_refused(
    tmp_path: Path,
) -> None:
    from tests.fakes.model_server import tool_reply

    with FakeModelServer() as server:
        server.script(
            tool_reply("schedule", {"action": "create", "text": "Stretch!", "when": "20m"}),
            text_reply("I could not schedule that."),
        )
        _, telegram, runs = _terminal_scenario(tmp_path, server, {})
        tool_result = str(server.requests[1].body["messages"][-1]["content"])
    assert "'is_error': True" in tool_result and "[owners]" in tool_result
    assert telegram == [] and runs == []


def test_a_heartbeat_the_owner_paused_stays_paused_across_gateway_starts(
    settings: Settings, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from app.cli.main import main

    initialise(settings, TEMPLATE_DIR)

    async def start_stop(changed: Settings | None = None) -> list[str]:
        async with await build_runtime(changed or settings) as runtime:
            scheduler = await start_automations(runtime, {})
            assert scheduler is not None
            armed = sorted(scheduler.armed_ids)
            await scheduler.stop()
        return armed

    assert asyncio.run(start_stop()) == ["pinch-job-1", "pinch-resync"]
    paused = CliRunner().invoke(main, ["jobs", "pause", "1"])
    assert paused.exit_code == 0, paused.output
    assert asyncio.run(start_stop()) == ["pinch-resync"]  # not armed: still paused
    hourly = settings.model_copy(
        update={"heartbeat": settings.heartbeat.model_copy(update={"every": "1h"})}
    )
    assert asyncio.run(start_stop(hourly)) == ["pinch-resync"]  # a new period, still paused
    out = CliRunner().invoke(main, ["jobs", "list", "--all"]).output
    assert "paused heartbeat every 1 h" in out and "active" not in out
