"""/access, /automations and /health: pairing codes approved, rejected and revoked; jobs paused,
resumed, run and cancelled, the heartbeat and standing intents; doctor's checks, the channels'
state, tokens per day with the prompt cache's share, and the redacted log tail."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from app.automations.assembly import keep_heartbeat
from app.automations.jobs import NewJob, Schedule, Target
from app.gateway.access import Pairing
from channels.base import ChannelHealth
from memory.store.intents_store import IntentScope
from memory.store.pairing_store import SqlitePairingStore
from memory.store.sessions import SessionKey
from tests.pages_support import page_settings, run_async, serve_pages, visible_text


def test_pairing_codes_are_approved_rejected_and_people_revoked(pinch_home: Path) -> None:
    settings = page_settings(
        pinch_home,
        owners={"telegram": ["111"]},
        telegram={"groups": {"-100": {"require_mention": True}}},
    )

    async def scenario() -> dict[str, Any]:
        async with serve_pages(settings, start=False) as page:
            pairing = Pairing(SqlitePairingStore(page.runtime.index.db))
            eve = pairing.request("telegram", "999", "Eve <b>")
            mallory = pairing.request("telegram", "666", None)
            assert eve and mallory
            seen: dict[str, Any] = {"list": await page.text("/access")}
            _, seen["approved"] = await page.post("/access/approve", {"code": eve.code})
            _, seen["rejected"] = await page.post("/access/reject", {"code": mallory.code})
            _, seen["again"] = await page.post("/access/approve", {"code": mallory.code})
            seen["eve in"] = pairing.is_approved("telegram", "999")
            seen["mallory in"] = pairing.is_approved("telegram", "666")
            _, seen["revoked"] = await page.post(
                "/access/revoke", {"channel": "telegram", "sender_id": "999"}
            )
            seen["eve still in"] = pairing.is_approved("telegram", "999")
            seen["codes"] = (eve.code, mallory.code)
            return seen

    seen = run_async(scenario())
    listing = seen["list"]
    for code in seen["codes"]:
        assert code in listing
    assert "Eve &lt;b&gt;" in listing and "Eve <b>" not in listing
    assert "111" in listing and "-100" in listing and "pairing" in listing  # owners, groups
    assert "Approved telegram user 999 (Eve &lt;b&gt;)" in seen["approved"]
    assert "Rejected the request of telegram user 666" in seen["rejected"]
    assert "No pending pairing request has the code" in seen["again"]
    assert seen["eve in"] and not seen["mallory in"]
    assert "Revoked telegram user 999" in seen["revoked"] and not seen["eve still in"]


def test_jobs_are_paused_resumed_run_and_cancelled_and_intents_cancelled(
    pinch_home: Path,
) -> None:
    settings = page_settings(
        pinch_home, owners={"telegram": ["111"]}, heartbeat={"every": "30m", "active_hours": None}
    )

    async def scenario() -> dict[str, Any]:
        async with serve_pages(settings, start=False) as page:
            automations = page.runtime.automations
            assert automations is not None
            now = datetime.now(UTC)
            job = automations.jobs.create(
                NewJob(
                    Schedule("cron", "30 8 * * *", "Europe/Berlin", now),
                    "reminder",
                    "Water the <plants>",
                    Target("telegram", "111"),
                    str(SessionKey.owner_main()),
                    owner_private=True,
                ),
                now,
            )
            keep_heartbeat(automations, settings)
            intents = page.runtime.agent.intents
            intent = intents.create(
                IntentScope.of(SessionKey.owner_main(), "owner"),
                ["Hangzhou"],
                "remind me of the return ticket",
                now=time.time(),
            )
            seen: dict[str, Any] = {"list": await page.text("/automations")}
            base = f"/automations/jobs/{job.id}"
            _, seen["paused"] = await page.post(f"{base}/pause", {})
            seen["state paused"] = automations.jobs.get(job.id).state  # type: ignore[union-attr]
            _, seen["resumed"] = await page.post(f"{base}/resume", {})
            seen["state resumed"] = automations.jobs.get(job.id).state  # type: ignore[union-attr]
            _, seen["run"] = await page.post(f"{base}/run", {})
            due = automations.jobs.get(job.id).next_run_utc  # type: ignore[union-attr]
            seen["due soon"] = due is not None and due <= datetime.now(UTC) + timedelta(seconds=5)
            _, seen["cancelled"] = await page.post(f"{base}/cancel", {})
            seen["state cancelled"] = automations.jobs.get(job.id).state  # type: ignore[union-attr]
            _, seen["resume ended"] = await page.post(f"{base}/resume", {})
            _, seen["intent"] = await page.post(f"/automations/intents/{intent.id}/cancel", {})
            seen["intent state"] = intents.get(intent.id).state  # type: ignore[union-attr]
            missing = await page.client.post("/automations/jobs/9999/pause")
            seen["missing"] = await missing.text()
            return seen

    seen = run_async(scenario())
    listing = visible_text(seen["list"])
    assert "Water the &lt;plants&gt;" in listing and 'cron "30 8 * * *"' in html_unescape(listing)
    assert "CET (Europe/Berlin)" in listing or "CEST (Europe/Berlin)" in listing  # owner's zone
    assert "Heartbeat" in listing and "every 30 min" in listing
    assert "Hangzhou" in listing and "remind me of the return ticket" in listing
    assert seen["state paused"] == "paused" and "paused." in seen["paused"]
    assert seen["state resumed"] == "active" and "next run" in seen["resumed"]
    assert seen["due soon"] and "will run now" in seen["run"]
    assert seen["state cancelled"] == "cancelled"
    assert "cannot be resumed" in seen["resume ended"]
    assert seen["intent state"] == "cancelled" and "Cancelled standing intent" in seen["intent"]
    assert "There is no job #9999." in seen["missing"]


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


class FakeGatewayState:
    """What /health reads of a running gateway: its channels, their health and failures."""

    def __init__(self) -> None:
        self.channels = {"telegram": object()}
        self.health = {
            "telegram": ChannelHealth(True, "connected as @pinch_bot; last poll 3 s ago")
        }
        self.failed = {"slack": "invalid_auth"}


def test_health_shows_checks_channels_tokens_per_day_and_a_redacted_log(
    pinch_home: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-live-abcdefghijklmnopqrstuvwxyz123456")
    settings = page_settings(pinch_home)

    async def scenario() -> dict[str, str]:
        seen = {}
        async with serve_pages(settings, start=False) as page:
            seen["no gateway"] = await page.text("/health")
            store = page.runtime.store
            session = store.current(SessionKey.owner_main())
            store.append(session.id, "user", {"text": "hi"})
            usage = {
                "input_tokens": 100,
                "output_tokens": 50,
                "cache_read_tokens": 300,
                "cache_write_tokens": 0,
                "model": "claude-test",
            }
            store.append(session.id, "assistant", {"text": "hello"}, usage)
            store.append(session.id, "assistant", {"text": "again"}, usage)
            logging.getLogger("pinch.test").warning(
                "calling with sk-live-abcdefghijklmnopqrstuvwxyz123456 now"
            )
            _, seen["doctor"] = await page.post("/health/doctor", {})
            page.ctx.services["gateway"] = FakeGatewayState()
            seen["page"] = await page.text("/health")
        return seen

    seen = run_async(scenario())
    assert "The gateway is not running" in seen["no gateway"]
    doctor = visible_text(seen["doctor"])
    for name in ("secrets", "file modes", "database", "index"):
        assert name in doctor
    assert "checks ran" in doctor and "without the model check" in doctor
    page = visible_text(seen["page"])
    assert "telegram" in page and "last poll 3 s ago" in page
    assert "slack" in page and "could not start: invalid_auth" in page
    today = datetime.now(page_tz()).strftime("%Y-%m-%d")
    assert f"{today} 2 800 600 0 100 75%" in page  # calls, prompt, cached, written, output
    assert "calling with [redacted] now" in page and "abcdefghijklmnop" not in seen["page"]


def page_tz():  # type: ignore[no-untyped-def]
    from zoneinfo import ZoneInfo

    return ZoneInfo("Europe/Berlin")


def test_no_action_changes_anything_on_a_get(pinch_home: Path) -> None:
    settings = page_settings(pinch_home)
    actions = (
        "/memory/edit?path=MEMORY.md&text=x&hash=absent",
        "/dreams/run",
        "/dreams/undo",
        "/dreams/dry-run",
        "/access/approve?code=ABCDEFGH",
        "/access/revoke?channel=telegram&sender_id=1",
        "/automations/jobs/1/cancel",
        "/automations/intents/1/cancel",
        "/health/doctor",
    )

    async def scenario() -> dict[str, int]:
        async with serve_pages(settings, start=False) as page:
            before = (settings.workspace_dir / "MEMORY.md").read_text()
            found = {}
            for path in actions:
                response = await page.client.get(path)
                found[path] = response.status
            assert (settings.workspace_dir / "MEMORY.md").read_text() == before
            return found

    statuses = run_async(scenario())
    # The editor answers GET with the form; every other action only answers POST.
    assert statuses.pop("/memory/edit?path=MEMORY.md&text=x&hash=absent") == 200
    assert set(statuses.values()) == {405}, statuses
