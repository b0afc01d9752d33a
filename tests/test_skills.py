"""Skills in skills/NAME/SKILL.md: listed in the owner's prompt by name and description only
(≤ 40 tokens each, a cap on the list), read on demand with read_file, malformed ones reported
and never fatal, `pinch skills list` and /skills, and what does not count as a skill."""

from __future__ import annotations

import asyncio
from pathlib import Path

from click.testing import CliRunner

from agent.context import render_context
from agent.policy import policy_for
from agent.skills import (
    MAX_LISTING_TOKENS,
    MAX_SKILL_TOKENS,
    Skills,
    discover_skills,
    skill_line,
)
from app.cli.main import main
from memory.store.sessions import SessionKey
from memory.text import estimate_tokens
from tests.agent_support import GROUP, OWNER, make_kit, template_workspace, tool_results
from tests.fakes.model_server import FakeModelServer, text_reply, tool_reply

TRIP = """---
name: trip-planner
description: Plan a trip day by day, with trains, bookings and a packing list.
---
# Trip planner

1. Ask for the dates and the cities first.
2. Check trains with the owner's rail card (see cards.md beside this file).
"""
INVOICE = """---
name: invoices
description: "Write an invoice in the owner's format: number, VAT, due in 30 days."
---
Use the template in template.md.
"""
RECIPE = """---
name: recipes
description: >
  Scale a recipe to a number of people and convert units to metric.
---
Multiply every quantity; round grams to 5.
"""
PERSON = SessionKey("main", "telegram", "direct", "501")


def with_skills(tmp_path: Path, **extra: str) -> Path:
    files = {
        "skills/trip-planner/SKILL.md": TRIP,
        "skills/trip-planner/cards.md": "BahnCard 50, valid to 2027.",
        "skills/invoices/SKILL.md": INVOICE,
        "skills/recipes/SKILL.md": RECIPE,
        **extra,
    }
    return template_workspace(tmp_path, **files)


def test_three_skills_are_listed_by_name_and_description_only(tmp_path: Path) -> None:
    workspace = with_skills(tmp_path)
    found = discover_skills(workspace)
    assert [s.name for s in found.skills] == ["invoices", "recipes", "trip-planner"]
    assert found.problems == ()
    section = Skills(workspace).section(OWNER, policy_for(OWNER))
    assert section is not None
    assert "- trip-planner: Plan a trip day by day" in section.text
    assert "Scale a recipe to a number of people and convert units to metric." in section.text
    assert "rail card" not in section.text and "BahnCard" not in section.text  # bodies stay out
    assert 'read_file path="skills/NAME/SKILL.md"' in section.text


def test_the_model_reads_a_skill_on_demand_with_read_file(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        server.script(
            tool_reply("read_file", {"path": "skills/trip-planner/SKILL.md"}),
            tool_reply("read_file", {"path": "skills/trip-planner/cards.md"}),
            text_reply("Which dates?"),
        )
        kit = make_kit(tmp_path, server, workspace=with_skills(tmp_path))
        try:
            reply = asyncio.run(kit.agent.handle(OWNER, "Plan my trip to Vienna."))
        finally:
            kit.index.close()
    assert reply.text == "Which dates?"
    assert "- invoices: Write an invoice" in server.requests[0].system_text()
    assert (
        "Ask for the dates and the cities first." in tool_results(server.requests[1])[0]["content"]
    )
    assert "BahnCard 50" in tool_results(server.requests[2])[1]["content"]


def test_a_malformed_skill_md_is_reported_and_the_others_still_work(tmp_path: Path) -> None:
    workspace = with_skills(
        tmp_path,
        **{
            "skills/broken/SKILL.md": "---\nname: broken\ndescription: [unclosed\n---\nBody\n",
            "skills/nameless/SKILL.md": "---\ndescription: no name here\n---\n",
            "skills/plain/SKILL.md": "Just text, no front matter.\n",
            "skills/other/SKILL.md": "---\nname: not-other\ndescription: x\n---\n",
            "skills/empty-folder/notes.md": "no SKILL.md",
        },
    )
    found = discover_skills(workspace)
    assert [s.name for s in found.skills] == ["invoices", "recipes", "trip-planner"]
    reasons = {p.path: p.reason for p in found.problems}
    assert "not valid YAML" in reasons["skills/broken/SKILL.md"]
    assert "name must be" in reasons["skills/nameless/SKILL.md"]
    assert "no front matter" in reasons["skills/plain/SKILL.md"]
    assert "differs from its folder" in reasons["skills/other/SKILL.md"]
    assert "no SKILL.md" in reasons["skills/empty-folder/SKILL.md"]
    section = Skills(workspace).section(OWNER, policy_for(OWNER))
    assert section is not None and "broken" not in section.text


def test_each_skill_costs_at_most_40_tokens_and_the_list_is_capped(tmp_path: Path) -> None:
    long = "Does many things carefully and at length, " * 20
    files = {
        f"skills/skill-{i:02d}/SKILL.md": f"---\nname: skill-{i:02d}\ndescription: {long}\n---\n"
        for i in range(60)
    }
    files["skills/cjk/SKILL.md"] = (
        "---\nname: cjk\ndescription: " + "整理会议记录" * 100 + "\n---\n"
    )
    workspace = template_workspace(tmp_path, **files)
    found = discover_skills(workspace)
    assert len(found.skills) == 61
    assert max(estimate_tokens(skill_line(s)) for s in found.skills) <= MAX_SKILL_TOKENS
    section = Skills(workspace).section(OWNER, policy_for(OWNER))
    assert section is not None
    assert estimate_tokens(section.text) <= MAX_LISTING_TOKENS + 80  # + the two-line header
    assert "more skill(s) in skills/ (not listed" in section.text
    assert sum(t for _, t in section.items) == estimate_tokens(section.text)


def test_skills_are_listed_only_in_the_owners_direct_chat(tmp_path: Path) -> None:
    skills = Skills(with_skills(tmp_path))
    assert skills.section(GROUP, policy_for(GROUP)) is None
    assert skills.section(PERSON, policy_for(PERSON)) is None


def test_only_regular_files_under_skills_count(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    (outside / "evil").mkdir(parents=True)
    (outside / "evil" / "SKILL.md").write_text("---\nname: evil\ndescription: x\n---\n")
    workspace = with_skills(
        tmp_path, **{"inbox/2026-01-10/SKILL.md": "---\nname: inbox\ndescription: x\n---\n"}
    )
    (workspace / "skills" / "evil").symlink_to(outside / "evil")
    (workspace / "skills" / "linked").mkdir()
    (workspace / "skills" / "linked" / "SKILL.md").symlink_to(outside / "evil" / "SKILL.md")
    found = discover_skills(workspace)
    assert [s.name for s in found.skills] == ["invoices", "recipes", "trip-planner"]
    assert [p.path for p in found.problems] == ["skills/linked/SKILL.md"]


def test_pinch_skills_list_shows_skills_and_malformed_ones(pinch_home: Path) -> None:
    with_skills(pinch_home, **{"skills/broken/SKILL.md": "no front matter"})
    result = CliRunner().invoke(main, ["skills", "list"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "trip-planner  Plan a trip day by day" in result.output
    assert "MALFORMED skills/broken/SKILL.md: no front matter" in result.output


def test_nothing_a_skill_holds_can_drive_the_terminal_and_invalid_utf8_is_named(
    pinch_home: Path,
) -> None:
    title = "\x1b]0;owned\x07"  # sets the terminal's title; click leaves it in
    with_skills(
        pinch_home,
        **{
            # YAML's own escapes: \e is ESC, \a is BEL
            "skills/loud/SKILL.md": (
                '---\nname: loud\ndescription: "Shouts \\e]0;owned\\aloudly"\n---\n'
            ),
            f"skills/odd{title}/SKILL.md": "no front matter",
        },
    )
    (pinch_home / "workspace" / "skills" / "latin").mkdir()
    (pinch_home / "workspace" / "skills" / "latin" / "SKILL.md").write_bytes(
        b"---\nname: latin\ndescription: caf\xe9\n---\n"
    )

    result = CliRunner().invoke(main, ["skills", "list"], catch_exceptions=False)

    assert "loud  Shouts loudly" in result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "MALFORMED skills/odd\\x1b]0;owned\\x07/SKILL.md" in result.output
    assert (
        "MALFORMED skills/latin/SKILL.md: not valid UTF-8 (byte 0xe9 at offset 32): save it as "
        "UTF-8" in result.output
    )


def test_the_skills_command_and_context_in_chat(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server, workspace=with_skills(tmp_path))
        try:
            reply = asyncio.run(kit.agent.handle(OWNER, "/skills"))
            in_group = asyncio.run(kit.agent.handle(GROUP, "/skills"))
            context = asyncio.run(kit.agent.context(OWNER))
        finally:
            kit.index.close()
    assert "Skills (3):" in reply.text and "recipes — Scale a recipe" in reply.text
    assert "owner's direct chat only" in in_group.text
    text = render_context(context, detail=True, window=200_000, threshold=150_000)
    assert "skills" in text and "trip-planner" in text
    assert server.requests == []  # commands never call the model
