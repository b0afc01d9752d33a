"""The context builder: bootstrap caps, privacy of group sessions, the cache-stable prefix."""

from __future__ import annotations

import asyncio
import json
from datetime import date
from pathlib import Path

from agent.context import ContextBuilder, cut_to_fit, load_bootstrap, render_context
from agent.history import History
from memory.store.sessions import SessionKey
from tests.agent_support import GROUP, OWNER, make_kit, template_workspace
from tests.fakes.model_server import FakeModelServer, text_reply


def test_an_agents_md_over_the_cap_keeps_head_70_and_tail_20_percent(tmp_path: Path) -> None:
    text = "".join(f"line {i:05d} of the rules\n" for i in range(1_300))[:29_989] + "END-OF-FILE"
    workspace = template_workspace(tmp_path, **{"AGENTS.md": text})

    [agents, *_] = load_bootstrap(workspace, private=True)

    assert agents.truncated and agents.chars == 30_000
    head, tail = text[:14_000], text[-4_000:]
    assert agents.text.startswith(head) and agents.text.endswith(tail)
    marker = agents.text[len(head) : -len(tail)]
    assert "12,000 of 30,000 characters of AGENTS.md cut" in marker
    assert 'read_file path="AGENTS.md"' in marker


def test_files_under_the_cap_are_loaded_whole() -> None:
    assert cut_to_fit("short", 20_000, "SOUL.md") == "short"


def test_the_total_cap_cuts_the_files_that_come_last(tmp_path: Path) -> None:
    big = "x" * 19_000
    files = {name: big for name in ("AGENTS.md", "SOUL.md", "TOOLS.md", "IDENTITY.md")}
    workspace = template_workspace(tmp_path, **files)

    loaded = load_bootstrap(workspace, private=True)

    assert sum(len(f.text) for f in loaded) <= 60_000 + 4 * 300  # markers are small
    by_name = {f.name: f for f in loaded}
    assert not by_name["TOOLS.md"].truncated and by_name["IDENTITY.md"].truncated
    assert "not loaded" in by_name["MEMORY.md"].text


def test_group_sessions_never_see_memory_md_or_user_md(tmp_path: Path) -> None:
    workspace = template_workspace(
        tmp_path,
        **{
            "MEMORY.md": "# MEMORY.md\n- Salary: 123456\n",
            "USER.md": "# USER.md\n- Lives at Elm 5\n",
        },
    )
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server, workspace=workspace)
        server.script(text_reply("Hi group."), text_reply("Hi owner."))
        asyncio.run(kit.agent.handle(GROUP, "hello everyone"))
        asyncio.run(kit.agent.handle(OWNER, "hello"))

    group_system, owner_system = (r.system_text() for r in server.requests)
    assert "Salary" not in group_system and "Elm 5" not in group_system
    assert "group conversation" in group_system and "Channel: telegram, group chat" in group_system
    assert "Salary: 123456" in owner_system and "Lives at Elm 5" in owner_system


def test_the_stable_prefix_is_cache_marked_and_byte_identical_across_turns(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        server.script(text_reply("First answer."), text_reply("Second answer."))
        asyncio.run(kit.agent.handle(OWNER, "First question"))
        second = asyncio.run(kit.agent.handle(OWNER, "Second question"))

    one, two = (r.body for r in server.requests)
    assert "cache_control" in two["tools"][-1] and "cache_control" in two["system"][-1]
    # The history before the newest user message is marked too: turn 1 is read from the cache.
    assert "cache_control" in two["messages"][-2]["content"][-1]
    dump = lambda value: json.dumps(value, sort_keys=True)  # noqa: E731
    assert dump(one["tools"]) == dump(two["tools"])
    assert dump(one["system"]) == dump(two["system"])
    assert dump(one["messages"][0]["content"][0]["text"]) == dump(
        two["messages"][0]["content"][0]["text"]
    )
    assert second.usage.cache_read_tokens > 0  # what the fake server's honest cache served
    assert "14:30" not in json.dumps(two["system"])  # no clock time in the cached prefix


def test_the_fixed_overhead_of_the_template_workspace_is_under_3000_tokens(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        context = asyncio.run(kit.agent.context(OWNER))
    assert context.fixed_tokens <= 3_000
    assert context.tokens == context.fixed_tokens  # a fresh session has no history


def test_context_detail_names_every_bootstrap_file_and_tool(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
    builder = ContextBuilder(kit.workspace)
    context = builder.build(
        OWNER, History(None, ()), kit.agent.tools.specs, today=date(2026, 1, 10), timezone="UTC"
    )

    listing = render_context(context, detail=False, window=200_000, threshold=176_000)
    detail = render_context(context, detail=True, window=200_000, threshold=176_000)

    assert len(listing.splitlines()) == 1 + len(context.parts)
    for name in ("AGENTS.md", "SOUL.md", "MEMORY.md", "USER.md", "memory_search", "current_time"):
        assert name in detail and name not in listing


def test_recalled_context_comes_right_before_the_message_and_is_replayed_unchanged(
    tmp_path: Path,
) -> None:
    async def recall(key: SessionKey, text: str) -> str | None:
        return "- MEMORY.md: the owner's sister is called Ines." if "sister" in text else None

    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        kit.agent.recall = recall
        server.script(text_reply("Ines."), text_reply("Sure."))
        asyncio.run(kit.agent.handle(OWNER, "What is my sister called?"))
        asyncio.run(kit.agent.handle(OWNER, "Thanks"))

    first, second = (r.body["messages"] for r in server.requests)
    recalled, message = first[-1]["content"]
    assert "<recalled_context>" in recalled["text"] and "Ines" in recalled["text"]
    assert message["text"] == "What is my sister called?"
    replayed = [{k: v for k, v in b.items() if k != "cache_control"} for b in second[0]["content"]]
    assert replayed == first[-1]["content"]
