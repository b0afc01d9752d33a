"""A backup taken from a running `pinch gateway` (real process, python-telegram-bot against the
fake Telegram, the agent against the scripted model server) while 20 messages flow through it
and `pinch memory index --force` rebuilds the index; restored into a new home."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from app.cli.setup import initialise
from app.config import load_settings
from tests.agent_support import responder
from tests.backup_support import file_hashes, pinch, rows, seed, settings_for
from tests.fakes.model_server import FakeModelServer, text_reply
from tests.fakes.telegram_server import FakeTelegram
from tests.test_gateway_telegram import pinch_gateway, wait_for

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "workspace_template"


def pinch_process(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli.main", *args],
        cwd=ROOT,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def hits(search_output: str) -> list[str]:
    """The path:lines of each search result, best first."""
    return re.findall(r"^(\S+:\d+-\d+)", search_output, re.MULTILINE)


def test_a_backup_taken_under_load_restores_every_event_session_job_intent_and_file(
    pinch_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    monkeypatch.setenv("PINCH_OWNERS__TELEGRAM", '["111"]')
    settings = load_settings()
    initialise(settings, TEMPLATE)
    notes = settings.workspace_dir / "memory"
    for day in range(1, 8):
        (notes / f"2026-11-0{day}.md").write_text(
            f"# Day {day}\n\nThe owner's kettle is green; the cat Miso ate {day} sardines.\n"
            + "".join(f"- note {i} of day {day}: the teapot stays blue.\n" for i in range(40)),
            encoding="utf-8",
        )
    seed(settings, events=2)
    pinch("memory", "index")
    texts = [f"question number {n}" for n in range(20)]
    with FakeModelServer() as model, FakeTelegram() as tg:
        model.respond_with(
            responder(turn=lambda r: text_reply(f"re: {r.last_user_text()}", delay_s=0.05))
        )
        gateway = pinch_gateway(tg, model)
        try:

            def answered(text: str) -> bool:
                return any(text in m.text for m in tg.sent)

            for text in texts[:5]:
                tg.push(tg.private_text(text))
            wait_for(lambda: all(answered(t) for t in texts[:5]), what="the first answers")
            rebuild = pinch_process("memory", "index", "--force")
            backup = pinch_process("backup", "--to", f"{tmp_path / 'archives'}/")
            for text in texts[5:]:
                tg.push(tg.private_text(text))
            assert backup.wait(timeout=120) == 0, backup.stdout.read() if backup.stdout else ""
            assert rebuild.wait(timeout=120) == 0, rebuild.stdout.read() if rebuild.stdout else ""
            [archive] = (tmp_path / "archives").glob("*.tar.gz")

            refused = pinch("restore", str(archive), ok=False)  # over the running gateway
            assert refused.exit_code == 1
            assert "A Pinch gateway is running" in refused.output, refused.output
            wait_for(lambda: all(answered(t) for t in texts), what="every answer")
        finally:
            gateway.send_signal(signal.SIGTERM)
            assert gateway.wait(timeout=30) == 0, gateway.stderr.read() if gateway.stderr else ""

    source = rows(settings.database_path)
    source_search = hits(pinch("memory", "search", "green kettle Miso sardines").output)
    with tarfile.open(archive, "r:gz") as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]

    new = settings_for(tmp_path / "restored", monkeypatch)
    out = pinch("restore", str(archive)).output
    assert "Counts checked against the manifest: equal." in out
    restored = rows(new.database_path)

    # Every event, session, job, intent and approval made before the backup started is there;
    # what the snapshot holds is exactly what the source held (events are only appended).
    events = restored["transcript_events"]
    assert set(events) <= set(source["transcript_events"])
    said = " ".join(str(e) for e in events)
    assert all(t in said for t in texts[:5])
    assert len(events) == manifest["counts"]["transcript_events"]
    assert {s[0] for s in restored["sessions"]} <= {s[0] for s in source["sessions"]}
    assert len(restored["sessions"]) == manifest["counts"]["sessions"]
    for table in ("jobs", "intents", "approved_senders"):
        assert [r[0] for r in restored[table]] == [r[0] for r in source[table]]
        assert len(restored[table]) == 1
    # Every file is the one archived, byte for byte (the database was checked while written:
    # opened since, its header says WAL), and the memory files are the source's.
    home_files = file_hashes(new.home)
    for name, entry in manifest["files"].items():
        assert name.endswith(".sqlite") or home_files[name] == entry["sha256"], name
    assert file_hashes(new.workspace_dir) == file_hashes(settings.workspace_dir)
    # Search answers the same from the restored home (after whatever the index needs).
    if "pinch memory index" in out:
        pinch("memory", "index")
    assert hits(pinch("memory", "search", "green kettle Miso sardines").output) == source_search
    assert source_search


def test_a_failed_scheduled_backup_of_a_running_gateway_alerts_the_owner_on_telegram(
    pinch_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("PINCH_BACKUP__EVERY", "1m")  # the first run 6 s after the start
    monkeypatch.setenv("PINCH_BACKUP__PATH", str(tmp_path / "a-file" / "backups"))
    monkeypatch.setenv("PINCH_OWNERS__TELEGRAM", '["111"]')
    initialise(load_settings(), TEMPLATE)
    with FakeModelServer() as model, FakeTelegram() as tg:
        gateway = pinch_gateway(tg, model)
        try:
            wait_for(
                lambda: any("scheduled backup failed" in m.text for m in tg.sent),
                timeout=40,
                what="the owner's alert",
            )
        finally:
            gateway.send_signal(signal.SIGTERM)
            assert gateway.wait(timeout=30) == 0, gateway.stderr.read() if gateway.stderr else ""
    [alert] = [m for m in tg.sent if "scheduled backup failed" in m.text]
    assert alert.chat_id == 111
    assert "Cannot write to" in alert.text and "pinch backup" in alert.text
