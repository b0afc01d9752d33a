"""Keeping a long conversation inside the context window without losing what was said.

When the next request would pass `context_window - reserve_floor - soft_threshold` tokens (or the
server says the prompt is too long):

1. `flush_memory`: one silent agent turn asks the model to append anything durable to today's
   log (or answer NO_REPLY). It may only read and append to the log, and runs at most once per
   compaction cycle, recorded with `SessionStore.mark_flushed`.
2. `compact`: the older turns (everything but roughly the last `keep_recent_share` of the budget)
   are summarised into Decisions / Open TODOs / Constraints/Rules / Pending user asks / Exact
   identifiers, stored as a `compaction` event, and indexed as transcript chunks so that a search
   still finds what the summary left out. The caller then retries its request.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date

from agent.agent_config import AgentConfig
from agent.context import Context
from agent.history import Turn, sender_label, split_turns, usage_record
from agent.media.render import attachment_line
from agent.model.errors import ModelError
from agent.model.factory import ModelClient
from agent.prompts import render
from agent.tools import FLUSH_TOOLS, ToolContext, ToolRegistry
from agent.types import Message, ModelRequest, TextBlock, Usage
from common.text import shorten
from memory.index.index import MemoryIndex
from memory.index.transcript_indexer import index_transcript
from memory.store.sessions import Session, SessionStore, TranscriptEvent
from memory.text import estimate_tokens

log = logging.getLogger(__name__)

SILENT_REPLY = "NO_REPLY"
FLUSH_TOOL_ROUNDS = 4
TOOL_RESULT_CHARS_IN_SUMMARY = 600


class CompactionError(Exception):
    """The history could not be summarised (nothing older to summarise, or the model failed)."""


@dataclass
class FlushOutcome:
    ran: bool
    reply: str = ""
    appended: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    error: str | None = None


class Compactor:
    def __init__(
        self,
        *,
        model: ModelClient,
        store: SessionStore,
        index: MemoryIndex,
        tools: ToolRegistry,
        config: AgentConfig,
    ) -> None:
        self.model = model
        self.store = store
        self.index = index
        self.tools = tools
        self.config = config

    @property
    def threshold(self) -> int:
        c = self.config
        return c.context_window - c.reserve_floor - c.soft_threshold

    @property
    def keep_tokens(self) -> int:
        c = self.config
        return int((c.context_window - c.reserve_floor) * c.keep_recent_share)

    def needs_compaction(self, context: Context) -> bool:
        return context.tokens > self.threshold

    # -- 1. the memory flush -----------------------------------------------------------------

    async def flush_memory(
        self, session: Session, context: Context, *, today: date, project: str | None = None
    ) -> FlushOutcome:
        """Run the silent flush turn unless this compaction cycle already had one.

        The request repeats the normal system prompt, tools and history (so the prompt cache
        serves them) and adds the flush instruction; tools outside FLUSH_TOOLS are refused.
        A failing flush is logged and recorded, never raised: compaction goes on regardless.
        """
        cycle = session.compactions
        if session.flushed_cycle >= cycle:
            return FlushOutcome(ran=False)
        outcome = FlushOutcome(ran=True)
        ctx = ToolContext(session.key, session.id, project=project)  # appends carry its tag
        prompt = render("flush", today=today)
        messages = _with_user_text(list(context.history.messages()), prompt)
        try:
            for _ in range(FLUSH_TOOL_ROUNDS):
                request = ModelRequest(
                    tuple(messages), context.system, context.tools, self.config.max_output_tokens
                )
                response = await self.model.complete(request)
                outcome.usage += response.usage
                outcome.reply = response.text.strip()
                if not response.tool_calls:
                    break
                results = [
                    await self.tools.call(call, ctx, allowed=FLUSH_TOOLS)
                    for call in response.tool_calls
                ]
                outcome.appended += [
                    r.content
                    for c, r in zip(response.tool_calls, results, strict=True)
                    if c.name == "memory_append" and not r.is_error
                ]
                messages += [response.to_message(), Message.tool_results(results)]
        except ModelError as exc:
            log.warning("The memory flush failed; compacting anyway: %s", exc)
            outcome.error = str(exc)
        record = {
            "cycle": cycle,
            "reply": outcome.reply[:500],
            "appended": outcome.appended,
            "error": outcome.error,
        }
        await asyncio.to_thread(
            self.store.append, session.id, "flush", record, usage_record(outcome.usage)
        )
        await asyncio.to_thread(self.store.mark_flushed, session.id, cycle)
        return outcome

    # -- 2. summarising the older turns ------------------------------------------------------

    async def compact(self, session: Session) -> tuple[Session, Usage]:
        """Summarise all but the recent turns; returns the updated session and the usage.

        Raises CompactionError when there is nothing older than the current turn, or the model
        cannot produce a summary.
        """
        events, previous = await asyncio.to_thread(self._live_events, session)
        turns = split_turns(events)
        cut = choose_cut(turns, self.keep_tokens)
        if cut == 0:
            raise CompactionError("nothing older than the current message to summarise")
        first_kept = turns[cut].first_seq
        transcript = render_turns(turns[:cut])
        try:
            summary, usage = await self._summarise(previous, transcript)
        except ModelError as exc:
            raise CompactionError(f"the summary failed: {exc}") from exc
        summary = with_file_paths(summary, turns[:cut])
        content = {"summary": summary, "first_kept_seq": first_kept}
        await asyncio.to_thread(
            self.store.append, session.id, "compaction", content, usage_record(usage)
        )
        session = await asyncio.to_thread(self.store.increment_compactions, session.id)
        await self.index_transcript(session, up_to_seq=first_kept - 1)
        return session, usage

    async def index_transcript(self, session: Session, *, up_to_seq: int | None = None) -> None:
        """Make the session's turns (up to `up_to_seq`) searchable; failures are only logged,
        since the transcript itself stays in the database and a rebuild replays it."""
        try:
            events = await asyncio.to_thread(self.store.events, session.id)
            if up_to_seq is not None:
                events = [e for e in events if e.seq <= up_to_seq]
            await asyncio.to_thread(index_transcript, self.index, session, events)
        except Exception:
            log.warning("Could not index the transcript of session %s", session.id, exc_info=True)

    def _live_events(self, session: Session) -> tuple[list[TranscriptEvent], str | None]:
        latest = self.store.latest_compaction(session.id)
        first = int(latest.content["first_kept_seq"]) if latest else 0
        previous = str(latest.content["summary"]) if latest else None
        return self.store.events(session.id, after_seq=max(0, first - 1)), previous

    async def _summarise(self, previous: str | None, transcript: str) -> tuple[str, Usage]:
        """Fold the transcript into the previous summary, piece by piece if it is long."""
        instructions = render("summary")
        # Each summary request must fit the window with room for the output (the reserve).
        budget = int((self.config.context_window - self.config.reserve_floor) * 0.6)
        piece_tokens = max(500, budget - estimate_tokens(instructions + (previous or "")))
        usage = Usage()
        summary = previous
        for piece in split_by_tokens(transcript, piece_tokens):
            prompt = render("summary_input", previous=summary, transcript=piece)
            request = ModelRequest(
                (Message.user(prompt),),
                instructions,
                max_tokens=self.config.max_output_tokens,
                cache_prefix=False,
            )
            response = await self.model.complete(request)
            usage += response.usage
            if not response.text.strip():
                raise CompactionError("the model returned an empty summary")
            summary = response.text.strip()
        assert summary is not None
        return summary, usage


def choose_cut(turns: Sequence[Turn], keep_tokens: int) -> int:
    """Index of the first turn to keep verbatim: the newest turns that fit in `keep_tokens`,
    always the newest one, never all of them when there are two or more."""
    if len(turns) < 2:
        return 0
    kept = turns[-1].tokens
    cut = len(turns) - 1
    while cut > 1 and kept + turns[cut - 1].tokens <= keep_tokens:
        cut -= 1
        kept += turns[cut].tokens
    return cut


def render_turns(turns: Sequence[Turn]) -> str:
    """The turns as plain text lines for the summariser: "[#seq] Owner: …"."""
    lines = []
    for turn in turns:
        for e in turn.events:
            c = e.content
            if e.kind == "user":  # other people's and automations' words are not the owner's
                who = sender_label(c.get("sender")).strip("[]") or "Owner"
                files = " ".join(attachment_line(a) for a in _attachments(c))
                lines.append(f"[#{e.seq}] {who}: {c.get('text', '')} {files}".rstrip())
            elif e.kind == "assistant" and c.get("text"):
                lines.append(f"[#{e.seq}] Assistant: {c['text']}")
            elif e.kind == "tool_call":
                args = json.dumps(c.get("input") or {}, ensure_ascii=False)
                lines.append(f"[#{e.seq}] Tool call {c.get('name')}: {args}")
            elif e.kind == "tool_result":
                text = str(c.get("content", ""))
                text = shorten(text, TOOL_RESULT_CHARS_IN_SUMMARY + 1)
                error = " (error)" if c.get("is_error") else ""
                lines.append(f"[#{e.seq}] Tool result{error}: {text}")
    return "\n".join(lines)


def _attachments(content: dict) -> list[dict]:
    return [a for a in content.get("attachments") or () if isinstance(a, dict) and a.get("path")]


def with_file_paths(summary: str, turns: Sequence[Turn]) -> str:
    """`summary`, with a line naming the files received in `turns` that it does not mention:
    an image or a document stays findable by its inbox path after its turn is summarised."""
    paths = [
        str(a["path"])
        for turn in turns
        for e in turn.events
        if e.kind == "user"
        for a in _attachments(e.content)
    ]
    missing = [p for p in dict.fromkeys(paths) if p not in summary]
    if not missing:
        return summary
    return f"{summary}\n\nFiles received (in the workspace): {', '.join(missing)}"


def split_by_tokens(text: str, max_tokens: int) -> list[str]:
    """`text` in line-aligned pieces of at most about `max_tokens` tokens each."""
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for line in text.split("\n"):
        tokens = estimate_tokens(line) + 1
        while tokens > max_tokens:  # one enormous line: hard-split it
            head = int(len(line) * max_tokens / tokens)
            pieces.extend(["\n".join(current)] if current else [])
            current, size = [], 0
            pieces.append(line[:head])
            line = line[head:]
            tokens = estimate_tokens(line) + 1
        if current and size + tokens > max_tokens:
            pieces.append("\n".join(current))
            current, size = [], 0
        current.append(line)
        size += tokens
    if current:
        pieces.append("\n".join(current))
    return pieces or [""]


def summary_block(summary: str, session_id: str, first_kept_seq: int) -> str:
    """The summary as it opens the history of later requests."""
    return render(
        "summary_header", summary=summary, session_id=session_id, last_seq=first_kept_seq - 1
    )


def _with_user_text(messages: list[Message], text: str) -> list[Message]:
    if messages and messages[-1].role == "user":
        last = messages[-1]
        return [*messages[:-1], Message("user", (*last.content, TextBlock(text)))]
    return [*messages, Message.user(text)]
