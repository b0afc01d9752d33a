"""A session's transcript events turned back into the messages a model sees.

The transcript (memory.store.sessions) is the source of truth for history: every user message,
assistant
message, tool call and tool result is an event. A model request replays the events after the
latest compaction, with that compaction's summary in front. Rebuilding is deterministic, so the
same events give byte-identical messages on every turn and the prompt cache keeps hitting.

A turn the owner cancelled (Ctrl-C) ends in an assistant event marked `cancelled`; it stays in
the transcript and is left out of the history.

Events of an interrupted turn (a crash or a cancel between a tool call and its result) are
repaired here, not in the store: a call without a result gets an error result, so the history
stays valid for every provider.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agent.media.render import attachment_line, document_block, image_refs
from agent.types import (
    ContentBlock,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ToolCall,
    ToolResult,
    Usage,
)
from memory.store.sessions import TranscriptEvent
from memory.text import estimate_tokens

CONVERSATION_KINDS = frozenset({"user", "assistant", "tool_call", "tool_result"})
# The assistant event `Agent.mark_cancelled` appends to a turn the owner cancelled.
CANCELLED_EVENT: dict[str, object] = {"text": "", "cancelled": True}
INTERRUPTED_RESULT = "No result was recorded: the turn was interrupted before this tool finished."


@dataclass(frozen=True)
class Turn:
    """One user message and everything the agent did in answer to it."""

    first_seq: int
    events: tuple[TranscriptEvent, ...]

    @property
    def tokens(self) -> int:
        return sum(message_tokens(m) for m in events_to_messages(self.events))


ImageLoader = Callable[[dict[str, Any]], ImageBlock | None]


@dataclass(frozen=True)
class History:
    """What a request replays: the latest summary (if any) and the turns kept after it, and the
    images it sends (by event seq): only the newest turn's, see `with_images`."""

    summary: str | None
    turns: tuple[Turn, ...]
    images: Mapping[int, tuple[ImageBlock, ...]] = field(default_factory=dict)

    def with_images(self, load: ImageLoader) -> History:
        """This history sending the images of its newest turn (the photos that came with the
        message being answered, and any a tool attached in answer to it), loaded with `load`.
        Older turns name their images by path only: an image is sent in the turn it arrived in
        and again only when asked for."""
        if not self.turns:
            return self
        images: dict[int, tuple[ImageBlock, ...]] = {}
        for event in self.turns[-1].events:
            if event.kind not in ("user", "tool_result"):
                continue
            blocks = tuple(b for b in (load(r) for r in image_refs(event.content)) if b)
            if blocks:
                images[event.seq] = blocks
        return replace(self, images=images) if images else self

    @property
    def image_tokens(self) -> int:
        return sum(b.tokens for blocks in self.images.values() for b in blocks)

    def messages(self) -> tuple[Message, ...]:
        events = [e for turn in self.turns for e in turn.events]
        messages = events_to_messages(events, self.images)
        if self.summary:
            messages = _prepend_user_text(messages, self.summary)
        return tuple(messages)


def build_history(
    events: Sequence[TranscriptEvent], summary: str | None, first_kept_seq: int = 0
) -> History:
    """The history from `first_kept_seq` on (the latest compaction's), split into turns; turns
    the owner cancelled are left out (their message is not answered later)."""
    kept = [e for e in events if e.seq >= first_kept_seq and e.kind in CONVERSATION_KINDS]
    turns = [turn for turn in split_turns(kept) if not _cancelled(turn)]
    return History(summary, tuple(turns))


def _cancelled(turn: Turn) -> bool:
    return any(e.kind == "assistant" and e.content.get("cancelled") for e in turn.events)


def split_turns(events: Iterable[TranscriptEvent]) -> list[Turn]:
    """Conversation events grouped by the user message that starts each turn."""
    turns: list[list[TranscriptEvent]] = []
    for event in events:
        if event.kind not in CONVERSATION_KINDS:
            continue
        if event.kind == "user" or not turns:
            turns.append([])
        turns[-1].append(event)
    return [Turn(group[0].seq, tuple(group)) for group in turns]


def user_blocks(content: dict) -> tuple[TextBlock, ...]:
    """A stored user message as content blocks: recalled context first, then the message.

    A message from anyone but the owner (a `sender` in the stored content; none means the owner)
    opens with who sent it, "[from Alice (telegram 555)]"; attachments follow as their paths,
    and the text of documents that were read as untrusted content (agent/media/render.py)."""
    recalled = content.get("recalled") or ""
    text = content.get("text") or ""
    label = sender_label(content.get("sender"))
    attached = [
        a for a in content.get("attachments") or () if isinstance(a, dict) and a.get("path")
    ]
    files = [attachment_line(a) for a in attached]
    body = "\n".join(part for part in (label, text, *files) if part)
    documents = [document_block(a) for a in attached]
    return tuple(TextBlock(t) for t in (recalled, body, *documents) if t)


def sender_label(sender: object) -> str:
    """How a non-owner sender is named in front of their message ("" for the owner)."""
    if not isinstance(sender, dict) or sender.get("kind", "owner") == "owner":
        return ""
    name = _clean(str(sender.get("name") or ""))
    ident = _clean(str(sender.get("id") or ""))
    if sender.get("kind") == "automation":
        return f"[automation: {name or ident or 'scheduled'}]"
    if sender.get("kind") == "system":
        return f"[system{': ' + name if name else ''}]"
    where = " ".join(p for p in (_clean(str(sender.get("channel") or "")), ident) if p)
    who = name or ident or "someone"
    return f"[from {who} ({where})]" if where and where != who else f"[from {who}]"


def _clean(text: str, limit: int = 64) -> str:
    """A display name safe inside a label: one line, no brackets or control characters."""
    kept = "".join(" " if (ch in "[]" or not ch.isprintable()) else ch for ch in text)
    return " ".join(kept.split())[:limit]


def events_to_messages(
    events: Iterable[TranscriptEvent], images: Mapping[int, tuple[ImageBlock, ...]] | None = None
) -> list[Message]:
    """Messages for the conversation events, consecutive same-role blocks merged; `images` (by
    event seq) follow their user message or tool result."""
    raw: list[tuple[Role, ContentBlock]] = []
    images = images or {}
    for event in events:
        c = event.content
        if event.kind == "user":
            raw.extend(("user", block) for block in user_blocks(c))
            raw.extend(("user", image) for image in images.get(event.seq, ()))
        elif event.kind == "assistant" and c.get("text"):
            raw.append(("assistant", TextBlock(c["text"])))
        elif event.kind == "tool_call":
            raw.append(("assistant", ToolCall(c["id"], c["name"], dict(c.get("input") or {}))))
        elif event.kind == "tool_result":
            result = ToolResult(
                c["tool_use_id"], str(c.get("content", "")), bool(c.get("is_error"))
            )
            raw.append(("user", result))
            raw.extend(("user", image) for image in images.get(event.seq, ()))
    messages: list[Message] = []
    for role, block in raw:
        if messages and messages[-1].role == role:
            messages[-1] = Message(role, (*messages[-1].content, block))
        else:
            messages.append(Message(role, (block,)))
    return _repair_tool_pairs(messages)


def _repair_tool_pairs(messages: list[Message]) -> list[Message]:
    """Give every tool call a result right after it, drop results without a call, and put
    results before text in a user message (the order the APIs require)."""
    out: list[Message] = []
    open_calls: list[str] = []
    for message in messages:
        if message.role == "assistant":
            if open_calls:
                out.append(Message.tool_results([_interrupted(i) for i in open_calls]))
            out.append(message)
            open_calls = [c.id for c in message.tool_calls]
            continue
        results = [b for b in message.content if isinstance(b, ToolResult)]
        answered = {r.tool_use_id for r in results}
        results = [r for r in results if r.tool_use_id in open_calls]
        results += [_interrupted(i) for i in open_calls if i not in answered]
        texts = [b for b in message.content if isinstance(b, TextBlock | ImageBlock)]
        open_calls = []
        if results or texts:
            out.append(Message("user", (*results, *texts)))
    if open_calls:
        out.append(Message.tool_results([_interrupted(i) for i in open_calls]))
    return out


def _interrupted(call_id: str) -> ToolResult:
    return ToolResult(call_id, INTERRUPTED_RESULT, is_error=True)


def _prepend_user_text(messages: list[Message], text: str) -> list[Message]:
    if messages and messages[0].role == "user":
        first = messages[0]
        results = [b for b in first.content if isinstance(b, ToolResult)]
        rest = [b for b in first.content if not isinstance(b, ToolResult)]
        return [Message("user", (*results, TextBlock(text), *rest)), *messages[1:]]
    return [Message.user(text), *messages]


def message_tokens(message: Message) -> int:
    """Estimated tokens of a message's text, tool inputs and tool results."""
    total = 4  # role and framing
    for block in message.content:
        if isinstance(block, TextBlock):
            total += estimate_tokens(block.text)
        elif isinstance(block, ImageBlock):
            total += block.tokens
        elif isinstance(block, ToolCall):
            total += estimate_tokens(block.name + json.dumps(dict(block.input), ensure_ascii=False))
        else:
            total += estimate_tokens(block.content) + 4
    return total


def usage_record(usage: Usage, model: str | None = None) -> dict[str, int | str]:
    """A model call's usage as stored on its transcript event."""
    record: dict[str, int | str] = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }
    if model:
        record["model"] = model
    return record
