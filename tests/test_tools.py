"""The agent's tools, called the way the turn loop calls them: errors become error results."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.tools import ToolContext
from agent.types import ToolCall, ToolResult
from memory.index.transcript_indexer import index_transcript
from memory.store.sessions import SessionKey
from tests.agent_support import GROUP, OWNER, Kit, make_kit, template_workspace
from tests.fakes.model_server import FakeModelServer

PRIVATE = {
    "MEMORY.md": "# MEMORY.md\n- The boat is called Gannet.\n",
    "USER.md": "# USER.md\n- The owner's boat is moored in Kiel.\n",
    "memory/2026-01-08.md": "# 2026-01-08\n- Ordered a new sail for the boat from Hamburg.\n",
}


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    with FakeModelServer() as server:  # the tools never call the model
        kit = make_kit(tmp_path, server, workspace=template_workspace(tmp_path, **PRIVATE))
    yield kit
    kit.index.close()


def call(kit: Kit, name: str, key: SessionKey = OWNER, /, **args: Any) -> ToolResult:
    session = kit.store.current(key)
    ctx = ToolContext(key, session.id)
    return asyncio.run(kit.agent.tools.call(ToolCall("toolu_1", name, args), ctx))


def test_memory_search_returns_hits_with_path_lines_score_and_snippet(kit: Kit) -> None:
    result = call(kit, "memory_search", query="sail Hamburg")
    assert not result.is_error
    answer = json.loads(result.content)
    [hit, *_] = answer["results"]
    assert hit["path"] == "memory/2026-01-08.md" and hit["lines"] == "1-2"
    assert "new sail" in hit["snippet"] and hit["score"] > 0
    assert answer["mode"] == "keyword-only"


def test_memory_search_in_a_group_sees_none_of_the_owners_memory_files(kit: Kit) -> None:
    owner_paths = {
        h["path"] for h in json.loads(call(kit, "memory_search", query="boat").content)["results"]
    }
    group = json.loads(call(kit, "memory_search", GROUP, query="boat").content)["results"]
    assert {"MEMORY.md", "USER.md", "memory/2026-01-08.md"} <= owner_paths
    assert group == []  # daily logs and session notes come from private chats too


def test_transcripts_are_found_only_from_their_own_conversation(kit: Kit) -> None:
    session = kit.store.current(OWNER)
    kit.store.append(session.id, "user", {"text": "My bike lock code is 3141."})
    index_transcript(kit.index, session, kit.store.events(session.id))

    owner = json.loads(call(kit, "memory_search", query="bike lock code").content)["results"]
    group = json.loads(call(kit, "memory_search", GROUP, query="bike lock code").content)
    other_peer = SessionKey("main", "telegram", "direct", "someone-else")
    stranger = json.loads(call(kit, "memory_search", other_peer, query="bike lock code").content)

    assert (
        owner[0]["path"] == f"sessions/{session.id}" and owner[0]["read_with"] == "transcript_read"
    )
    assert group["results"] == [] and stranger["results"] == []
    read = call(kit, "transcript_read", path=f"sessions/{session.id}", **{"from": 1})
    assert not read.is_error and "3141" in read.content
    refused = call(kit, "transcript_read", other_peer, path=f"sessions/{session.id}")
    assert refused.is_error and "3141" not in refused.content


def test_memory_get_reads_lines_but_never_transcripts(kit: Kit) -> None:
    got = call(kit, "memory_get", path="memory/2026-01-08.md", **{"from": 2}, lines=1)
    assert not got.is_error and got.content.endswith(
        "- Ordered a new sail for the boat from Hamburg."
    )
    transcript = call(kit, "memory_get", path="sessions/abc")
    assert transcript.is_error and "transcript_read" in transcript.content


def test_private_files_are_unreadable_in_groups(kit: Kit) -> None:
    for tool in ("memory_get", "read_file"):
        result = call(kit, tool, GROUP, path="MEMORY.md")
        assert result.is_error and "Gannet" not in result.content
        daily = call(kit, tool, GROUP, path="memory/2026-01-08.md")
        assert daily.is_error and "sail" not in daily.content


@pytest.mark.parametrize(
    "path", ["../outside.md", "/etc/passwd", "memory/../../x", "~/.ssh/id_rsa"]
)
def test_read_file_never_leaves_the_workspace(kit: Kit, path: str) -> None:
    (kit.workspace.parent / "outside.md").write_text("secret", encoding="utf-8")
    result = call(kit, "read_file", path=path)
    assert result.is_error and "secret" not in result.content


def test_read_file_refuses_symlinks_and_reads_workspace_files(kit: Kit) -> None:
    (kit.workspace.parent / "outside.md").write_text("secret", encoding="utf-8")
    (kit.workspace / "link.md").symlink_to(kit.workspace.parent / "outside.md")
    assert call(kit, "read_file", path="link.md").is_error
    soul = call(kit, "read_file", path="SOUL.md", lines=1)
    assert soul.content == "# SOUL.md — who you are"


def test_memory_append_writes_todays_log_and_it_is_searchable_at_once(kit: Kit) -> None:
    result = call(kit, "memory_append", text="- Booked the ferry to Bornholm, ref FX-2231.")
    assert result.content == "Appended to memory/2026-01-10.md."
    log = (kit.workspace / "memory/2026-01-10.md").read_text(encoding="utf-8")
    assert log.startswith("# 2026-01-10") and "FX-2231" in log
    hits = json.loads(call(kit, "memory_search", query="ferry Bornholm").content)["results"]
    assert hits[0]["path"] == "memory/2026-01-10.md"


def test_remember_records_a_dated_active_fact_and_is_refused_in_groups(kit: Kit) -> None:
    result = call(
        kit, "remember", file="USER.md", text="Prefers window seats", section="Preferences"
    )
    assert not result.is_error
    user_md = (kit.workspace / "USER.md").read_text(encoding="utf-8")
    assert "- Prefers window seats <!-- observed: 2026-01-10 | status: active -->" in user_md
    refused = call(kit, "remember", GROUP, file="MEMORY.md", text="anything")
    assert refused.is_error and "only the owner's direct chat" in refused.content
    assert "anything" not in (kit.workspace / "MEMORY.md").read_text(encoding="utf-8")


def test_current_time_is_in_the_owners_time_zone(kit: Kit) -> None:
    assert (
        call(kit, "current_time").content == "2026-01-10 14:30 (Saturday), Europe/Berlin (UTC+0100)"
    )


def test_arguments_of_the_wrong_type_are_explained(kit: Kit) -> None:
    result = call(kit, "memory_search", query=5)
    assert result.is_error and "'query' must be of type string" in result.content
    missing = call(kit, "remember", file="USER.md")
    assert missing.is_error and "Missing required argument(s): text" in missing.content
