"""Nothing crosses between agents: two agents (and the default one) in one home, each holding
facts the others must never see, driven through the real commands — `pinch memory search`,
`pinch chat` (the real anthropic SDK against the scripted model server: Active Memory's deep
recall and the agent's memory_search tool), `pinch memory dream`, `pinch pairing`, `pinch
jobs`, `pinch web login` — with `--agent`."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from app.cli.main import main
from app.config import load_settings
from tests.agent_support import all_text
from tests.fakes.model_server import FakeModelServer, text_reply, tool_reply

# What each agent knows; every other agent must never see it.
SECRETS = {
    "main": "The spare key is with the neighbour Ulrike.",
    "alice": "The spare key is under the zebra stone.",
    "bob": "The spare key is in the blue flowerpot.",
}
LOCKERS = {"main": "5500", "alice": "9931", "bob": "1234"}
NOTES = {
    "main": "The owner prefers aisle seats on trains.",
    "alice": "The owner prefers window seats on long flights.",
    "bob": "The owner prefers window seats on night buses.",
}


def pinch(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=input)


def ok(*args: str, input: str | None = None) -> str:
    result = pinch(*args, input=input)
    assert result.exit_code == 0, result.output
    return result.output


def workspace(home: Path, agent: str) -> Path:
    return home / "workspace" if agent == "main" else home / "agents" / agent / "workspace"


def database(home: Path, agent: str) -> Path:
    return home / "agents" / agent / "agent.sqlite"


def count(home: Path, agent: str, table: str) -> int:
    db = sqlite3.connect(database(home, agent))
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        return (
            int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]) if table in tables else 0
        )
    finally:
        db.close()


def others(agent: str) -> list[str]:
    return [a for a in SECRETS if a != agent]


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(api_key="test-key") as fake:
        yield fake


@pytest.fixture(autouse=True)
def home(pinch_home: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """main, alice and bob, each with its own spare key, locker code and seat preference."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("PINCH_AGENT__MODEL", "claude-test")
    monkeypatch.setenv("PINCH_AGENT__API_BASE", server.url)
    monkeypatch.setenv("PINCH_AGENT__MAX_RETRIES", "0")
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    for name in ("MIN_SCORE", "MIN_QUERIES", "MIN_RECALLS", "MIN_DAYS"):  # a lenient dream gate
        monkeypatch.setenv(f"PINCH_DREAMING__{name}", "0" if name == "MIN_SCORE" else "1")
    ok("init")
    ok("agents", "add", "alice")
    ok("agents", "add", "bob")
    today = datetime.now().date().isoformat()
    for agent in SECRETS:
        ws = workspace(pinch_home, agent)
        (ws / "MEMORY.md").write_text(
            f"# MEMORY.md\n\n- My locker code is {LOCKERS[agent]}. <!-- trigger: locker -->\n",
            encoding="utf-8",
        )
        (ws / "memory" / "2026-11-30.md").write_text(
            f"# 2026-11-30\n\n- {SECRETS[agent]}\n", encoding="utf-8"
        )
        (ws / "memory" / f"{today}.md").write_text(
            f"# {today}\n\n- {NOTES[agent]}\n", encoding="utf-8"
        )
    return pinch_home


@pytest.mark.parametrize("agent", ["main", "alice", "bob"])
def test_memory_search_finds_only_the_agents_own_notes(home: Path, agent: str) -> None:
    found = ok("memory", "search", "--agent", agent, "spare key")

    assert SECRETS[agent] in found
    for other in others(agent):
        assert SECRETS[other] not in found
    assert str(workspace(home, agent)) in ok("memory", "status", "--agent", agent)


def test_chat_recall_and_memory_tools_see_only_the_agents_memory(
    home: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # bob's own setting (the installation's tests say "triggers"): deep recall on every turn.
    monkeypatch.setenv("PINCH_AGENTS__BOB__AGENT__RECALL_MODE", "always")
    monkeypatch.setenv("PINCH_AGENTS__BOB__AGENT__RECALL_TIMEOUT_S", "60")  # a busy test machine
    server.script(
        tool_reply("memory_search", {"query": "spare key"}),  # Active Memory's deep recall
        text_reply("The spare key is in the blue flowerpot (2026-11-30)."),
        tool_reply("memory_search", {"query": "spare key where"}),  # the agent's own tool call
        text_reply("In the blue flowerpot."),
    )

    out = ok("chat", "--agent", "bob", input="Where did I put the spare key?\n")

    assert "In the blue flowerpot." in out
    assert len(server.requests) == 4
    recall_result, turn, tool_result = (all_text(r) for r in server.requests[1:])
    assert "blue flowerpot" in recall_result  # deep recall's search ran, over bob's notes
    assert "blue flowerpot" in turn  # the recalled summary reached bob's turn
    assert "blue flowerpot" in tool_result and LOCKERS["bob"] in turn
    for request in server.requests:
        text = all_text(request)
        for other in others("bob"):
            assert "zebra" not in text and "neighbour" not in text
            assert LOCKERS[other] not in text and NOTES[other] not in text
    assert count(home, "bob", "transcript_events") > 0
    assert (
        count(home, "alice", "transcript_events") == count(home, "main", "transcript_events") == 0
    )


def test_the_fast_recall_path_offers_only_the_agents_trigger_entries(
    home: Path, server: FakeModelServer
) -> None:
    server.script(text_reply("It is 9931."))

    ok("chat", "--agent", "alice", input="What is my locker code?\n")

    [request] = server.requests
    text = all_text(request)
    assert LOCKERS["alice"] in text
    assert LOCKERS["bob"] not in text and LOCKERS["main"] not in text


def test_dreaming_reads_and_writes_only_the_agents_files_and_runs(
    home: Path, server: FakeModelServer
) -> None:
    for agent in SECRETS:  # every agent recalled its note once: each a candidate of its own
        assert "seats" in ok("memory", "search", "--agent", agent, "prefers seats")
    before = {a: (workspace(home, a) / "MEMORY.md").read_text(encoding="utf-8") for a in SECRETS}
    server.script(text_reply('{"action": "added"}'))

    ok("memory", "dream", "--agent", "bob")

    assert len(server.requests) == 1  # bob's one candidate; nobody else's
    sent = all_text(server.requests[0])
    assert "night buses" in sent and "long flights" not in sent and "aisle" not in sent
    assert NOTES["bob"].removeprefix("The owner ") in (
        workspace(home, "bob") / "MEMORY.md"
    ).read_text(encoding="utf-8")
    assert (workspace(home, "bob") / "DREAMS.md").is_file()
    for other in others("bob"):
        now = (workspace(home, other) / "MEMORY.md").read_text(encoding="utf-8")
        assert now == before[other]
        assert not (workspace(home, other) / "DREAMS.md").exists()
        assert count(home, other, "dream_runs") == 0
    assert count(home, "bob", "dream_runs") == 1
    assert "last dream      none yet" in ok("memory", "status", "--agent", "alice")


def test_pairing_approved_for_one_agent_does_not_admit_the_stranger_to_another(
    home: Path,
) -> None:
    from app.gateway.access import Pairing
    from memory.store.db import open_database
    from memory.store.pairing_store import SqlitePairingStore

    def pairing(agent: str) -> Pairing:
        path = load_settings(agent_id=agent).database_path
        return Pairing(SqlitePairingStore(open_database(path, vector_backend="numpy")))

    bob = pairing("bob")
    request = bob.request("telegram", "555", "Stranger")
    bob.close()
    assert request is not None

    elsewhere = pinch("pairing", "approve", request.code, "--agent", "alice")
    ok("pairing", "approve", request.code, "--agent", "bob")

    assert elsewhere.exit_code == 1 and "No pending pairing request" in elsewhere.output
    for agent, admitted in (("bob", True), ("alice", False), ("main", False)):
        store = pairing(agent)
        try:
            assert store.is_approved("telegram", "555") is admitted, agent
        finally:
            store.close()
    assert "approved  telegram user 555" in ok("pairing", "list", "--agent", "bob")
    assert "555" not in ok("pairing", "list", "--agent", "alice")
    assert "555" not in ok("pairing", "list")
    # What each agent's gateway decides (its access check, built as app/wiring.py builds it).
    assert gateway_decision("bob", "555").action == "answer"
    alice = gateway_decision("alice", "555")
    assert alice.action == "reply" and "approve" in (alice.text or "")  # a code of alice's own


def gateway_decision(agent: str, sender: str) -> Any:
    from app.channel_registry import Owners, channel_settings
    from app.gateway.access import Access, Pairing
    from channels.base import InboundMessage
    from memory.store.db import open_database
    from memory.store.pairing_store import SqlitePairingStore

    settings = load_settings(agent_id=agent)
    pairing = Pairing(SqlitePairingStore(open_database(settings.database_path)))
    access = Access(
        owners=Owners.from_settings(settings), channels=channel_settings(settings), pairing=pairing
    )
    message = InboundMessage(
        channel="telegram",
        sender_id=sender,
        chat_id=sender,
        chat_type="direct",
        text="hello",
        message_id="1",
        dedup_key=f"{sender}:1",
    )
    try:
        return access.check(message)
    finally:
        pairing.close()


def test_a_job_added_for_one_agent_is_listed_only_for_it(home: Path) -> None:
    from app.automations.jobs import Jobs, NewJob, Schedule, Target
    from memory.store.db import open_database
    from memory.store.jobs_store import SqliteJobStore

    path = load_settings(agent_id="bob").database_path
    store = Jobs(SqliteJobStore(open_database(path, vector_backend="numpy")))
    now = datetime.now(UTC)
    store.create(
        NewJob(
            Schedule("cron", "0 9 * * *", "Europe/Berlin", now),
            "reminder",
            "water bob's plants",
            Target("telegram", "111"),
            "bob:telegram:direct:owner",
            owner_private=True,
        ),
        now,
    )
    store.close()

    assert "water bob's plants" in ok("jobs", "list", "--agent", "bob")
    assert "water bob's plants" not in ok("jobs", "list", "--agent", "alice")
    assert "water bob's plants" not in ok("jobs", "list")
    assert "water bob's plants" not in ok("--agent", "alice", "jobs", "list", "--all")


def test_a_web_login_link_is_one_agents_and_intents_stay_apart(home: Path) -> None:
    ok("web", "login", "--agent", "bob")

    assert count(home, "bob", "web_login_tokens") == 1
    assert count(home, "alice", "web_login_tokens") == count(home, "main", "web_login_tokens") == 0
    for agent in SECRETS:
        assert ok("intents", "list", "--agent", agent) == ok("intents", "list")
