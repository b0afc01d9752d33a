"""What one model request contains, in a cache-friendly order, and how big each part is.

Order: system prompt (instructions, workspace bootstrap files, a runtime block that changes at
most once a day) → tool schemas → history (latest compaction summary + the turns after it, each
user message carrying its recalled context in front). Everything before the newest user message
is byte-identical from one turn to the next as long as the files do not change, so a provider's
prompt cache serves it.

Prompt sections from elsewhere (the skills listing, the MCP servers' tool listing: each a
`PromptSource`) follow the workspace files, before the runtime block; each is its own part in
/context, the MCP one counting its servers' tool schemas too (one item per server).

Bootstrap files are capped per file and in total; a file over its cap keeps its first 70 % and
last 20 % around a marker naming the file to read in full. MEMORY.md and USER.md are loaded only
in the owner's direct chats, and only the tools the session's policy offers are listed
(agent/policy.py decides both).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Protocol

from agent.history import History
from agent.policy import OWNER_FILES, SessionPolicy, policy_for
from agent.prompts import render
from agent.types import ModelRequest, ToolSpec
from memory.store.sessions import SessionKey
from memory.text import estimate_tokens

BOOTSTRAP_FILES = (
    "AGENTS.md",
    "SOUL.md",
    "TOOLS.md",
    "IDENTITY.md",
    "USER.md",
    "HEARTBEAT.md",
    "MEMORY.md",
)
PRIVATE_FILES = OWNER_FILES
HEAD_SHARE, TAIL_SHARE = 0.7, 0.2
MIN_FILE_BUDGET = 400  # below this, a file is named but not loaded


@dataclass(frozen=True)
class BootstrapFile:
    name: str
    text: str  # as injected, marker included when cut
    chars: int  # length of the file itself
    truncated: bool


def cut_to_fit(text: str, limit: int, name: str) -> str:
    """`text` if it fits in `limit` characters, else its first 70 % and last 20 % of `limit`
    around a marker naming the file to read in full."""
    if len(text) <= limit:
        return text
    head, tail = int(limit * HEAD_SHARE), int(limit * TAIL_SHARE)
    marker = render("truncated", cut=len(text) - head - tail, total=len(text), name=name)
    return text[:head] + marker + (text[-tail:] if tail else "")


def load_bootstrap(
    workspace: Path, *, private: bool, max_chars: int = 20_000, total_max_chars: int = 60_000
) -> list[BootstrapFile]:
    """The workspace's bootstrap files in prompt order; MEMORY.md and USER.md only if `private`."""
    files: list[BootstrapFile] = []
    remaining = total_max_chars
    for name in BOOTSTRAP_FILES:
        if name in PRIVATE_FILES and not private:
            continue
        path = workspace / name
        if path.is_symlink() or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace").strip()
        if not text:
            continue
        limit = min(max_chars, remaining)
        if limit < MIN_FILE_BUDGET:
            note = f'[{name} not loaded: the bootstrap budget is used up; read_file path="{name}"]'
            files.append(BootstrapFile(name, note, len(text), True))
            continue
        injected = cut_to_fit(text, limit, name)
        files.append(BootstrapFile(name, injected, len(text), injected != text))
        remaining -= len(injected)
    return files


@dataclass(frozen=True)
class PromptSection:
    """A block of the system prompt given by a `PromptSource`, and how /context counts it:
    by `items` when there are any (they may count tool schemas sent beside the text), else by
    the text's tokens."""

    name: str  # its part in /context: "skills", "mcp servers"
    text: str  # "" adds no block (e.g. MCP tools all sent as schemas)
    items: tuple[tuple[str, int], ...] = ()


class PromptSource(Protocol):
    def section(self, key: SessionKey, policy: SessionPolicy) -> PromptSection | None:
        """This source's block for `key`'s conversation under `policy` (None: nothing)."""
        ...


HISTORY_PARTS = frozenset({"compaction summary", "history", "recalled context"})


@dataclass(frozen=True)
class ContextPart:
    """One part of a request and its estimated tokens; `items` break it down for /context detail."""

    name: str
    tokens: int
    items: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Context:
    system: tuple[str, ...]
    tools: tuple[ToolSpec, ...]
    history: History
    parts: tuple[ContextPart, ...]

    @property
    def tokens(self) -> int:
        return sum(p.tokens for p in self.parts)

    @property
    def fixed_tokens(self) -> int:
        """System prompt, workspace files, sections (skills, MCP servers), runtime block and
        tool schemas: paid on every call."""
        return sum(p.tokens for p in self.parts if p.name not in HISTORY_PARTS)

    def request(self, *, max_tokens: int) -> ModelRequest:
        return ModelRequest(
            messages=self.history.messages(),
            system=self.system,
            tools=self.tools,
            max_tokens=max_tokens,
        )


class ContextBuilder:
    def __init__(
        self,
        workspace: Path,
        *,
        max_chars: int = 20_000,
        total_max_chars: int = 60_000,
        sources: Sequence[PromptSource] = (),
    ) -> None:
        self.workspace = workspace
        self.max_chars = max_chars
        self.total_max_chars = total_max_chars
        self.sources = tuple(sources)

    def build(
        self,
        key: SessionKey,
        history: History,
        tools: Sequence[ToolSpec],
        *,
        today: date,
        timezone: str,
        policy: SessionPolicy | None = None,
        channel: str | None = None,
        provided: Sequence[ToolSpec] = (),
        project: str | None = None,
    ) -> Context:
        """The context for `key`'s next request (under `policy`, by default the owner's word in
        `key`'s conversation; `project`: the session's active one). `history.summary` is the
        rendered summary block. `tools` are filtered by the policy; `provided` (a provider's
        tools, already chosen for this session: MCP) are sent after them and counted by their
        source's section."""
        policy = policy or policy_for(key)
        tools = [t for t in tools if policy.offers(t.name)]
        sections = [s for src in self.sources if (s := src.section(key, policy)) is not None]
        instructions = render("system", private=policy.owner_private, group=key.is_group)
        files = load_bootstrap(
            self.workspace,
            private=policy.owner_private,
            max_chars=self.max_chars,
            total_max_chars=self.total_max_chars,
        )
        chat_type = key.chat_type if key.thread_id is None else f"{key.chat_type} thread"
        runtime = render(
            "runtime",
            today=today,
            timezone=timezone,
            channel=channel or key.channel,
            chat_type=chat_type,
            project=project,
        )
        system = (
            instructions,
            *([render("bootstrap", files=files)] if files else []),
            *(s.text for s in sections if s.text),
            runtime,
        )
        parts = (
            ContextPart("system prompt", estimate_tokens(instructions)),
            _files_part(files),
            *(_section_part(s) for s in sections),
            ContextPart("runtime", estimate_tokens(runtime)),
            _tools_part(tools),
            *_history_parts(history),
        )
        return Context(system, (*tools, *provided), history, parts)


def tool_tokens(tool: ToolSpec) -> int:
    schema = {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}
    return estimate_tokens(json.dumps(schema, ensure_ascii=False))


def _files_part(files: Sequence[BootstrapFile]) -> ContextPart:
    items = []
    for f in files:
        label = f"{f.name} (cut from {f.chars:,} chars)" if f.truncated else f.name
        items.append((label, estimate_tokens(f.text) + 6))
    return ContextPart("workspace files", sum(t for _, t in items), tuple(items))


def _section_part(section: PromptSection) -> ContextPart:
    if section.items:
        return ContextPart(section.name, sum(t for _, t in section.items), section.items)
    return ContextPart(section.name, estimate_tokens(section.text))


def _tools_part(tools: Sequence[ToolSpec]) -> ContextPart:
    items = tuple((t.name, tool_tokens(t)) for t in tools)
    return ContextPart("tool schemas", sum(t for _, t in items), items)


def _history_parts(history: History) -> tuple[ContextPart, ...]:
    summary = ContextPart("compaction summary", estimate_tokens(history.summary or ""))
    items, recalled = [], 0
    for turn in history.turns:
        turn_recalled = sum(
            estimate_tokens(e.content.get("recalled") or "")
            for e in turn.events
            if e.kind == "user"
        )
        recalled += turn_recalled
        items.append((f"turn #{turn.first_seq}", turn.tokens - turn_recalled))
    images = tuple(
        (f"{b.path or 'image'} ({b.width}×{b.height})", b.tokens)
        for blocks in history.images.values()
        for b in blocks
    )
    return (
        summary,
        ContextPart("history", sum(t for _, t in items), tuple(items)),
        ContextPart("recalled context", recalled),
        ContextPart("images", sum(t for _, t in images), images),
    )


def render_context(context: Context, *, detail: bool, window: int, threshold: int) -> str:
    """The text of `/context list` (one line per part) or `/context detail` (and their items)."""
    lines = [
        f"Context: ~{context.tokens:,} tokens of {window:,} "
        f"(memory flush and compaction at {threshold:,}); fixed overhead ~{context.fixed_tokens:,}."
    ]
    for part in context.parts:
        count = f"  ({len(part.items)})" if part.items else ""
        lines.append(f"  {part.name:<20}{part.tokens:>8,}{count}")
        if detail:
            lines.extend(f"      {label:<30}{tokens:>8,}" for label, tokens in part.items)
    return "\n".join(lines)
