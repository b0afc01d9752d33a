"""The nightly dream in the running gateway: its own timer, started whether or not
`[automations]` runs, firing at 03:00 owner time and running a real dream (the anthropic SDK
against the scripted FakeModelServer); what `pinch memory status` says afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from app.automations.nightly_dream import DREAM_JOB_ID, run_dream, start_nightly_dream
from app.config import load_settings
from tests.fakes.model_server import FakeModelServer, text_reply
from tests.test_dreaming_cli import NOTE, dream_home, pinch


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(api_key="test-key") as s:
        yield s


@pytest.fixture
def home(pinch_home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeModelServer) -> Path:
    """Automations off, dreaming on (the default) with a lenient gate, one recalled note."""
    monkeypatch.setenv("PINCH_AUTOMATIONS__ENABLED", "false")
    return dream_home(pinch_home, monkeypatch, server)


def test_the_nightly_dream_fires_at_3_and_dreams_with_automations_off(
    home: Path, server: FakeModelServer
) -> None:
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED

    settings = load_settings()
    assert not settings.automations.enabled and settings.dreaming.enabled

    async def night() -> datetime:
        timer = await start_nightly_dream(settings, "Asia/Tokyo")
        assert timer is not None
        try:
            job = timer.get_job(DREAM_JOB_ID)
            assert job is not None
            due: datetime = job.next_run_time
            ran = asyncio.Event()
            timer.add_listener(lambda _event: ran.set(), EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
            job.modify(next_run_time=datetime.now(UTC))  # travel to 03:00: the timer fires
            await asyncio.wait_for(ran.wait(), 20)
        finally:
            timer.shutdown(wait=False)
        return due

    server.script(text_reply('{"action": "added"}'))
    due = asyncio.run(night())
    local = due.astimezone(ZoneInfo("Asia/Tokyo"))
    assert (local.hour, local.minute) == (3, 0)
    assert len(server.requests) == 1
    ws = home / "workspace"
    assert NOTE in (ws / "MEMORY.md").read_text(encoding="utf-8")
    assert "dream #1" in (ws / "DREAMS.md").read_text(encoding="utf-8")
    status = pinch("memory", "status").output
    assert "promoted 1 of 1 candidates (append)" in status


def test_a_nightly_dream_that_cannot_call_the_model_says_why_in_status(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    asyncio.run(run_dream(load_settings()))
    assert not (home / "workspace" / "DREAMS.md").exists()
    status = pinch("memory", "status").output
    assert "last dream" in status and "failed: ANTHROPIC_API_KEY is not set" in status


def test_no_nightly_timer_when_dreaming_is_disabled(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_DREAMING__ENABLED", "false")

    async def start() -> object:
        return await start_nightly_dream(load_settings(), "UTC")

    assert asyncio.run(start()) is None
