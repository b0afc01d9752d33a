"""Projects in the agent: `/project` and `/status`, the session's project across a restart and
`/new`, Active Memory's trigger entries and standing intents limited to their project, and what
the agent writes (daily-log appends, the session note) tagged with the active project — asserted
on what the scripted model server received and on the files written."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.active_memory import ActiveMemory
from agent.projects import ProjectDirectory
from memory.lifecycle.intents import IntentScope
from memory.store.sessions import SessionKey
from tests.agent_support import GROUP, OWNER, Kit, kind_of, make_kit, template_workspace
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply, tool_reply

MEMORY = """# MEMORY.md
## Facts to keep
- The kitchen tiles are from Porcelanosa. <!-- trigger: tiles, kitchen -->
  <!-- project: renovation -->
<!-- project: apollo --> <!-- trigger: tiles, kitchen -->
- Apollo's office kitchen tiles are the client's choice.
- Anna is allergic to peanuts. <!-- trigger: Anna, peanuts -->
"""
RENOVATION_TILES = "The kitchen tiles are from Porcelanosa."
APOLLO_TILES = "Apollo's office kitchen tiles are the client's choice."
T = 1_768_051_800.0  # the kit's fixed clock (2026-01-10 14:30 Berlin)
PROJECTS = ProjectDirectory.of({"renovation": ([], []), "apollo": (["-100200"], [])})


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as s:
        yield s


@pytest.fixture
def kit(tmp_path: Path, server: FakeModelServer) -> Iterator[Kit]:
    workspace = template_workspace(tmp_path, **{"MEMORY.md": MEMORY})
    k = make_kit(tmp_path, server, workspace=workspace, projects=PROJECTS, recall_mode="triggers")
    k.agent.recall = ActiveMemory(
        model=k.agent.model,
        store=k.store,
        tools=k.agent.tools,
        workspace=k.workspace,
        config=k.agent.config,
        index=k.index,
        projects=PROJECTS,
    )
    yield k
    k.index.close()


def say(kit: Kit, text: str, key: SessionKey = OWNER) -> str:
    return asyncio.run(kit.agent.handle(key, text)).text


def newest_user_text(request: RecordedRequest) -> str:
    message = request.body["messages"][-1]
    return "\n".join(b.get("text", "") for b in message["content"] if isinstance(b, dict))


# ---- /project and /status ---------------------------------------------------------------------


def test_project_sets_shows_and_clears_the_sessions_project(kit: Kit) -> None:
    assert say(kit, "/project").startswith("Project: none. Known projects: apollo")
    assert "Project for this session: renovation." in say(kit, "/project Renovation")
    assert say(kit, "/project").startswith("Project: renovation.")
    assert "project renovation" in say(kit, "/status")
    assert say(kit, "/project none").startswith("No project for this session now")
    assert "project none" in say(kit, "/status")


def test_a_bad_project_name_is_one_line_of_advice_and_changes_nothing(kit: Kit) -> None:
    say(kit, "/project apollo")
    answer = say(kit, "/project the wedding!")
    assert "is not a project name" in answer and "\n" not in answer
    assert kit.agent.projects.active(kit.store.current(OWNER)) == "apollo"


def test_the_project_lasts_for_the_session_across_a_restart(
    tmp_path: Path, server: FakeModelServer, kit: Kit
) -> None:
    say(kit, "/project apollo")
    kit.index.close()
    restarted = make_kit(tmp_path, server, workspace=kit.workspace, projects=PROJECTS)
    try:
        assert say(restarted, "/project").startswith("Project: apollo.")
    finally:
        restarted.index.close()


def test_a_chat_mapped_by_config_starts_in_its_project_and_new_starts_there_again(
    kit: Kit, server: FakeModelServer
) -> None:
    assert say(kit, "/project", GROUP) == "Project: apollo."  # no list of projects in a group
    say(kit, "/project none", GROUP)
    assert say(kit, "/project", GROUP) == "Project: none."
    server.script(text_reply("group-chat"))
    say(kit, "/new", GROUP)
    assert say(kit, "/project", GROUP) == "Project: apollo."


# ---- Active Memory and standing intents --------------------------------------------------------


def test_a_trigger_entry_of_project_a_is_not_injected_while_b_is_active(
    kit: Kit, server: FakeModelServer
) -> None:
    say(kit, "/project apollo")
    server.script(text_reply("ok"))
    say(kit, "Which kitchen tiles did we pick?")
    recalled = newest_user_text(server.requests[-1])
    assert APOLLO_TILES in recalled and RENOVATION_TILES not in recalled
    assert "Project: apollo" in server.requests[-1].system_text()  # the model knows it too


def test_a_trigger_entry_of_project_a_is_injected_while_a_is_active(
    kit: Kit, server: FakeModelServer
) -> None:
    say(kit, "/project renovation")
    server.script(text_reply("ok"))
    say(kit, "Which kitchen tiles did we pick?")
    recalled = newest_user_text(server.requests[-1])
    assert RENOVATION_TILES in recalled and APOLLO_TILES not in recalled


def test_without_a_project_only_untagged_trigger_entries_are_injected(
    kit: Kit, server: FakeModelServer
) -> None:
    server.script(text_reply("ok"), text_reply("ok"))
    say(kit, "Which kitchen tiles did we pick?")
    say(kit, "Can Anna have peanuts?")
    first, second = (newest_user_text(r) for r in server.requests)
    assert RENOVATION_TILES not in first and APOLLO_TILES not in first
    assert "Anna is allergic to peanuts." in second


def test_an_intent_created_in_a_project_fires_only_there(kit: Kit, server: FakeModelServer) -> None:
    say(kit, "/project apollo")
    server.script(
        tool_reply("intent", {"action": "create", "triggers": ["deadline"], "do": "Mention QA."}),
        text_reply("Armed."),
    )
    say(kit, "When the deadline comes up, remind me of QA.")
    [intent] = kit.agent.intents.intents()
    assert intent.scope.project == "apollo"
    say(kit, "/project renovation")
    server.script(text_reply("ok"), text_reply("ok"))
    say(kit, "The deadline is Friday.")
    assert "Mention QA." not in newest_user_text(server.requests[-1])
    say(kit, "/project apollo")
    say(kit, "The deadline is Friday.")
    assert "Mention QA." in newest_user_text(server.requests[-1])


def test_an_intent_created_without_a_project_fires_in_every_project(kit: Kit) -> None:
    scope = IntentScope.of(OWNER, "owner")
    kit.agent.intents.create(scope, ["dentist"], "Ask about the appointment.", now=T - 60)
    in_project = IntentScope.of(OWNER, "owner", project="apollo")
    assert kit.agent.intents.candidates(in_project, "my dentist", now=T)


# ---- what the agent writes ---------------------------------------------------------------------


def test_a_daily_log_append_carries_the_active_projects_tag(
    kit: Kit, server: FakeModelServer
) -> None:
    say(kit, "/project apollo")
    server.script(
        tool_reply("memory_append", {"text": "- Deadline moved to June 20.\n- QA starts May."}),
        text_reply("Noted."),
    )
    say(kit, "Note: the deadline moved to June 20, QA starts in May.")
    log = (kit.workspace / "memory/2026-01-10.md").read_text(encoding="utf-8")
    assert "- Deadline moved to June 20. <!-- project: apollo -->" in log
    assert "- QA starts May. <!-- project: apollo -->" in log
    hits = kit.index.search("deadline June", project="apollo")
    assert hits[0].path == "memory/2026-01-10.md" and hits[0].project == "apollo"


def test_the_session_note_on_new_carries_the_tag(kit: Kit, server: FakeModelServer) -> None:
    say(kit, "/project renovation")
    server.script(text_reply("Noted the tiles."))
    say(kit, "The tiler comes on Monday.")
    server.script(text_reply("tiler visit"))
    reply = say(kit, "/new")
    assert "memory/2026-01-10-tiler-visit.md" in reply
    note = (kit.workspace / "memory/2026-01-10-tiler-visit.md").read_text(encoding="utf-8")
    assert note.splitlines()[0].endswith("<!-- project: renovation -->")
    hits = kit.index.search("tiler Monday", project="renovation")
    assert hits and hits[0].path.endswith("tiler-visit.md") and hits[0].project == "renovation"


def tool_result_text(request: RecordedRequest) -> str:
    """The text of the first tool result in the newest message of `request`."""
    for block in request.body["messages"][-1]["content"]:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            content = block["content"]
            return str(content if isinstance(content, str) else content[0]["text"])
    raise AssertionError("no tool result in the newest message")


def test_memory_search_takes_a_project_and_star_for_all(kit: Kit, server: FakeModelServer) -> None:
    server.script(
        tool_reply("memory_search", {"query": "kitchen tiles", "project": "apollo"}),
        tool_reply("memory_search", {"query": "kitchen tiles", "project": "*"}),
        tool_reply("memory_search", {"query": "kitchen tiles", "project": "no such!"}),
        text_reply("done"),
    )
    say(kit, "Search the tiles three ways.")
    apollo, every, bad = (tool_result_text(r) for r in server.requests[1:])
    assert json.loads(apollo)["results"][0]["project"] == "apollo"
    assert {h.get("project") for h in json.loads(every)["results"]} >= {"apollo", "renovation"}
    assert "is not a project name" in bad


def test_the_memory_flush_before_compaction_carries_the_tag(
    tmp_path: Path, server: FakeModelServer
) -> None:
    from tests.test_compaction import SMALL_WINDOW, chat_until_compacted, small_workspace

    def answer(request: RecordedRequest) -> Reply:
        match kind_of(request):
            case "flush":
                return tool_reply("memory_append", {"text": "Apollo QA starts in May."})
            case "summary":
                return text_reply("Decisions: none.")
            case _:
                return text_reply("ok")

    kit = make_kit(
        tmp_path / "flush",
        server,
        workspace=small_workspace(tmp_path),
        projects=PROJECTS,
        **SMALL_WINDOW,
    )
    try:
        say(kit, "/project apollo")
        server.respond_with(answer)
        chat_until_compacted(kit)
    finally:
        kit.index.close()
    log = (kit.workspace / "memory/2026-01-10.md").read_text(encoding="utf-8")
    assert "Apollo QA starts in May. <!-- project: apollo -->" in log


def test_the_sessions_project_is_stored_and_a_reset_can_carry_it(kit: Kit) -> None:
    session = kit.store.set_project(kit.store.current(OWNER).id, "apollo")
    assert kit.store.get(session.id) == session and session.project == "apollo"
    carried = kit.store.reset(OWNER, session.project)  # a reset after failed compaction
    assert carried.project == "apollo" and kit.store.current(OWNER) == carried
    assert kit.store.reset(OWNER).project is None  # /new: the chat's default again
