"""Skills: folders `workspace/skills/NAME/SKILL.md` in Anthropic's Agent Skills format — YAML
front matter with `name` and `description`, then the instructions; files beside it are its
resources. The system prompt lists each skill by name and description only (≤ 40 tokens a
skill, ≤ `MAX_LISTING_TOKENS` in all); the model reads a body or a resource with `read_file`
when it needs it.

Only regular files under the workspace's `skills/` count (no symlinks; a fetched page or a
stranger's file is never a skill), and no tool of Pinch's writes there: a skill is the owner's
own, trusted. It is listed only in the owner's direct chats, the only ones that may read it. A
malformed SKILL.md is reported (`pinch skills list`, `/skills`, `pinch doctor`), never fatal.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from agent.context import PromptSection
from agent.policy import SessionPolicy
from agent.prompts import render
from common.printable import printable
from common.text import shorten
from memory.index.reading import shown_path
from memory.store.sessions import SessionKey
from memory.text import estimate_tokens

SKILLS_DIR = "skills"
SKILL_FILE = "SKILL.md"
MAX_SKILL_TOKENS = 40  # one skill's line in the prompt
MAX_LISTING_TOKENS = 800  # all of them (≈ 20 skills); more are counted, not listed
MAX_FILE_BYTES = 256 * 1024
MAX_DESCRIPTION = 1_024  # the format's own limit
_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?")


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: str  # workspace-relative: "skills/NAME/SKILL.md"


@dataclass(frozen=True)
class SkillProblem:
    path: str
    reason: str


@dataclass(frozen=True)
class SkillSet:
    skills: tuple[Skill, ...]
    problems: tuple[SkillProblem, ...]


class SkillError(ValueError):
    pass


def parse_skill(text: str, folder: str) -> tuple[str, str]:
    """The `name` and `description` of a SKILL.md's front matter, or SkillError saying why not."""
    if not text.startswith("---"):
        raise SkillError("no front matter: the file must start with a line '---'")
    lines = text.split("\n")
    try:
        end = next(i for i, line in enumerate(lines[1:], 1) if line.rstrip() == "---")
    except StopIteration:
        raise SkillError("the front matter is not closed by a line '---'") from None
    try:
        data = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 2})" if where is not None else ""
        raise SkillError(f"the front matter is not valid YAML{line}") from None
    if not isinstance(data, dict):
        raise SkillError("the front matter must be a YAML mapping with name and description")
    name, description = data.get("name"), data.get("description")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SkillError(
            "name must be lower-case letters, digits and '-' (at most 64), like the folder's"
        )
    if name != folder:
        raise SkillError(f"name {name!r} differs from its folder {folder!r}")
    if not isinstance(description, str) or not description.strip():
        raise SkillError("description is missing (say what the skill does and when to use it)")
    if len(description) > MAX_DESCRIPTION:
        raise SkillError(f"description is longer than {MAX_DESCRIPTION} characters")
    return name, printable(" ".join(description.split()))  # it is printed, too


def discover_skills(workspace: Path) -> SkillSet:
    """Every skill under `workspace/skills/`, and the folders that are not valid skills."""
    root = workspace / SKILLS_DIR
    if root.is_symlink() or not root.is_dir():
        return SkillSet((), ())
    skills, problems = [], []
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        rel = f"{SKILLS_DIR}/{shown_path(entry.name)}/{SKILL_FILE}"  # printed: no escapes
        if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
            continue
        path = Path(entry.path) / SKILL_FILE
        if path.is_symlink() or not path.is_file():
            problems.append(SkillProblem(rel, f"no {SKILL_FILE} (or it is a link)"))
            continue
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                raise SkillError(f"larger than {MAX_FILE_BYTES // 1024} KB")
            text = path.read_text(encoding="utf-8")
            name, description = parse_skill(text.replace("\r\n", "\n"), entry.name)
        except UnicodeDecodeError as exc:
            at = f"byte 0x{exc.object[exc.start]:02x} at offset {exc.start}"
            problems.append(SkillProblem(rel, f"not valid UTF-8 ({at}): save it as UTF-8"))
            continue
        except (SkillError, OSError) as exc:
            reason = str(exc) if isinstance(exc, SkillError) else f"unreadable ({exc})"
            problems.append(SkillProblem(rel, reason))
            continue
        skills.append(Skill(name, description, rel))
    return SkillSet(tuple(skills), tuple(problems))


def skill_line(skill: Skill) -> str:
    """One skill in the prompt: its name and as much of its description as fits 40 tokens."""
    head = f"- {skill.name}: "
    room = (MAX_SKILL_TOKENS - estimate_tokens(head)) * 4
    line = head + shorten(skill.description, max(room, 8), at_space=True)
    while estimate_tokens(line) > MAX_SKILL_TOKENS and room > 8:  # CJK weighs more
        room = room * 3 // 4
        line = head + shorten(skill.description, room, at_space=True)
    return line


class Skills:
    """The skills listing, a `PromptSource` for the context builder (re-read when the skills
    folder or a SKILL.md changes)."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self._cache: tuple[tuple[object, ...], SkillSet] | None = None

    def current(self) -> SkillSet:
        stamp = _stamp(self.workspace / SKILLS_DIR)
        if self._cache is None or self._cache[0] != stamp:
            self._cache = (stamp, discover_skills(self.workspace))
        return self._cache[1]

    def section(self, key: SessionKey, policy: SessionPolicy) -> PromptSection | None:
        if not policy.owner_private:  # only the owner's direct chats may read skills/
            return None
        found = self.current().skills
        if not found:
            return None
        lines: list[str] = []
        items: list[tuple[str, int]] = []
        budget = MAX_LISTING_TOKENS
        for skill in found:
            line = skill_line(skill)
            if estimate_tokens(line) > budget:
                break
            budget -= estimate_tokens(line)
            lines.append(line)
            items.append((skill.name, estimate_tokens(line)))
        text = render("skills", lines=lines, more=len(found) - len(lines))
        items.append(("(listing)", estimate_tokens(text) - sum(t for _, t in items)))
        return PromptSection("skills", text, tuple(items))


def _stamp(root: Path) -> tuple[object, ...]:
    """Changes when a skill folder or SKILL.md is added, removed or edited."""
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return ()
    stamp: list[object] = []
    for entry in entries:
        try:
            st = os.stat(Path(entry.path) / SKILL_FILE, follow_symlinks=False)
            stamp.append((entry.name, st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            stamp.append((entry.name, None))
    return tuple(stamp)
