"""The agent: one turn of conversation, from a message to a durable reply.

    runtime = await build_runtime(settings)            # app/wiring.py builds the Agent
    request = AgentRequest(SessionKey.owner_main(), "What did we decide about the trip?")
    async for event in runtime.agent.run(request):     # TextDelta… Notice… Final(reply)
        ...

`Agent.run` (agent/requests.py documents the request and the events) is the way in. A turn
stores the message — with who sent it, when that is not the owner — before calling the model,
then runs the tool loop — model call, tool calls, tool results, each stored as it happens — until
the model answers without tools; the final answer is stored before the `Final` event. When the
context grows too big the memory flush and compaction run first (compaction.py); slash commands
are answered without the model (commands.py). A restart resumes every session from the database;
a request marked `resumed` (the gateway hands it again after a stop) finishes its interrupted turn
instead of storing the message twice. What a turn may see and do comes from its `SessionPolicy`
(policy.py). The `Agent` builds nothing itself: app/wiring.py `build_agent` hands it its tools,
writer, intents, context builder, compactor and recall.

`Agent.handle(key, text, on_text)` is the older, owner-only form with a synchronous callback,
kept for tests and benchmarks.

Ordering: messages of one session must be handled one at a time. The gateway's per-session
queues own that order; `Agent` keeps a simple per-key lock only as a safety net for callers
without a queue (the terminal chat, tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

from agent.agent_config import AgentConfig
from agent.commands import AgentStatus, parse_command, run_command
from agent.compaction import CompactionError, Compactor, summary_block
from agent.context import Context, ContextBuilder
from agent.history import CANCELLED_EVENT, build_history
from agent.intent_tool import standing_intents_block
from agent.media.reader import MediaReader
from agent.media.render import load_image
from agent.memory_tools import session_attachments
from agent.message_limit import fit_message
from agent.model.errors import ContextTooLongError, cut_off_notice
from agent.model.factory import ModelClient
from agent.policy import SessionPolicy, policy_for
from agent.projects import ProjectDirectory
from agent.prompts import render
from agent.requests import AgentEvent, AgentReply, AgentRequest, Final, Notice, TextDelta
from agent.session_hook import save_session_note
from agent.tools import ToolContext, ToolRegistry
from agent.turn_events import (
    read_outside_content,
    same_turn,
    store_response,
    store_results,
    user_content,
)
from agent.turn_state import Emit
from agent.turn_state import TurnState as _Turn
from agent.types import ModelResponse, ToolCall, ToolResult
from common.clock import Clock
from memory.files.writes import WorkspaceWriter
from memory.index.index import MemoryIndex
from memory.lifecycle.intents import IntentStore
from memory.store.lineage import record_session_note
from memory.store.sessions import Session, SessionKey, SessionStore

log = logging.getLogger(__name__)

__all__ = ["Agent", "AgentReply", "AgentRequest", "AgentStatus"]

TextCallback = Callable[[str], None]
# Finds memory worth putting in front of a message (active memory); None when there is none.
# Called only for the owner's own messages in the owner's direct chats (owner_private).
Recall = Callable[[SessionKey, str], Awaitable[str | None]]

RESET_NOTICE = (
    "(This conversation had grown too long and summarising it failed, so I started a fresh "
    "session. Earlier messages stay searchable in memory.)"
)
NOTE_WAIT_S = 1.0  # how long /new waits for the note before answering without its name
EMPTY_ANSWER = "(The model sent an empty answer; ask again.)"
TOOL_LOOP_STOPPED = "(No answer: the model kept calling tools. Ask again, more narrowly.)"
TOOL_LIMIT_RESULT = (
    "Not run: this turn has used all its tool calls. Answer now with what you have, and say "
    "what is left undone."
)


class Agent:
    """One agent over one session store and memory index. Everything it uses is handed in,
    built by the composition root (app/wiring.py `build_agent`): the tools the model may call,
    the writer of memory files, the standing intents, the context builder, the compactor and
    the recall of active memory (None: no recall)."""

    def __init__(
        self,
        *,
        model: ModelClient,
        store: SessionStore,
        index: MemoryIndex,
        workspace: Path,
        config: AgentConfig,
        clock: Clock,
        writer: WorkspaceWriter,
        intents: IntentStore,
        tools: ToolRegistry,
        context_builder: ContextBuilder,
        compactor: Compactor,
        recall: Recall | None,
        projects: ProjectDirectory | None = None,
        media: MediaReader | None = None,
    ) -> None:
        self.model = model
        self.store = store
        self.index = index
        self.workspace = workspace
        self.config = config
        self.clock = clock
        self.writer = writer  # the owner's memory files (session notes)
        self.intents = intents  # standing intents, matched before every reply
        self.tools = tools
        self.context_builder = context_builder
        self.compactor = compactor
        self.recall = recall
        self.projects = projects or ProjectDirectory()  # which project a session is in
        self.media = media  # voice notes, images and documents (None: paths only)
        self._locks: dict[str, asyncio.Lock] = {}
        self._ending: set[asyncio.Task[str | None]] = set()  # notes of ended sessions

    # -- the public API ----------------------------------------------------------------------

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentEvent]:
        """Answer `request`, yielding `TextDelta`s and `Notice`s as they come, `Final` last.

        The turn runs in its own task, so a slow consumer never stalls the model stream (events
        queue up). Raises the turn's `ModelError` (worded as advice) after the events before it;
        everything stored up to then stays stored. Closing the iterator early, or cancelling
        its consumer, cancels the turn.
        """
        queue: asyncio.Queue[AgentEvent | None] = asyncio.Queue()
        task = asyncio.ensure_future(self._handle(request, queue.put_nowait))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (event := await queue.get()) is not None:
                yield event
            yield Final(task.result())
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def handle(
        self, key: SessionKey, text: str, on_text: TextCallback | None = None
    ) -> AgentReply:
        """The owner's message `text` in `key`'s conversation; `on_text` receives the reply (and
        notices) as it streams. The older form of `run`, for the owner only."""

        def emit(event: AgentEvent) -> None:
            if on_text is None:
                return
            if isinstance(event, TextDelta):
                on_text(event.text)
            elif isinstance(event, Notice):
                on_text(event.text + "\n\n")

        return await self._handle(AgentRequest(key, text), emit)

    async def _handle(self, request: AgentRequest, emit: Emit) -> AgentReply:
        key = request.key
        async with self._locks.setdefault(str(key), asyncio.Lock()):
            if request.resumed and (resumed := await self._resume(request, emit)) is not None:
                return resumed
            command = parse_command(request.text)
            if command is None:
                return await self._run_turn(request, request.text, emit)
            result = await run_command(self, key, command, channel=request.channel)
            if result.follow_up:  # "/new <message>": a fresh session, then the message
                return await self._run_turn(request, result.follow_up, emit, [result.text])
            session = await asyncio.to_thread(self.store.current, key)
            return AgentReply(result.text, session.id, command=command.name)

    async def mark_cancelled(self, request: AgentRequest) -> bool:
        """The owner cancelled the turn answering `request` (Ctrl-C), after it ended: its
        message stays in the transcript, marked cancelled, and later requests leave that turn
        out (it is not answered unless asked again). False when the transcript does not end in
        that message's turn (it was cancelled before being stored)."""
        key = request.key
        async with self._locks.setdefault(str(key), asyncio.Lock()):
            session = await asyncio.to_thread(self.store.current, key)
            users = await asyncio.to_thread(self.store.events, session.id, kinds=("user",))
            if not users or not same_turn(users[-1].content, request):
                return False
            await asyncio.to_thread(self.store.append, session.id, "assistant", CANCELLED_EVENT)
            return True

    async def new_session(self, key: SessionKey) -> tuple[Session, str | None, bool]:
        """Start a new session for `key` at once; the old one's note is written and its
        transcript indexed in the background (naming the note asks the model: seconds).

        Returns the new session, the workspace path of the note if it was written within
        `NOTE_WAIT_S` (None: nothing to note, or not yet), and whether it is still being
        written. `drain()` waits for notes still being written (call it before closing)."""
        old = await asyncio.to_thread(self.store.current, key)
        new = await asyncio.to_thread(self.store.reset, key)
        task = asyncio.ensure_future(self._end_session(old, policy_for(key).writes_memory))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)
        done, _ = await asyncio.wait({task}, timeout=NOTE_WAIT_S)
        return new, task.result() if done else None, not done

    async def drain(self) -> None:
        """Wait until the notes of ended sessions are written (before the process stops)."""
        while self._ending:
            await asyncio.gather(*list(self._ending), return_exceptions=True)

    async def _end_session(self, old: Session, writes_memory: bool) -> str | None:
        # The owner's memory/ takes no notes of other conversations: the index keeps them.
        note = await self._session_note(old) if writes_memory else None
        try:
            await self.compactor.index_transcript(old)
        except Exception:
            log.warning("Could not index the transcript of %s", old.id, exc_info=True)
        return note

    async def _session_note(self, old: Session) -> str | None:
        note = None
        try:
            tainted = await asyncio.to_thread(read_outside_content, self.store, old.id)
            note = await save_session_note(
                old,
                store=self.store,
                writer=self.writer,
                model=self.model,
                clock=self.clock,
                slug_timeout_s=self.config.slug_timeout_s,
                origin="untrusted" if tainted else None,  # it may repeat a fetched page
                project=self.projects.active(old),
            )
        except Exception:  # the owner asked for a new session; a failed note must not stop it
            log.warning("Could not write the session note of %s", old.id, exc_info=True)
        if note is not None:  # lineage: `pinch memory forget` finds the note by its session
            try:
                await asyncio.to_thread(
                    record_session_note, self.index.db, self.workspace, old.id, note
                )
            except Exception:
                log.warning("Could not record the lineage of %s", note, exc_info=True)
        return note

    async def context(self, key: SessionKey) -> Context:
        """What `key`'s next request would contain, part by part (for /context)."""
        session = await asyncio.to_thread(self.store.current, key)
        return await asyncio.to_thread(self._build_context, session, policy_for(key))

    async def status(self, key: SessionKey) -> AgentStatus:
        session = await asyncio.to_thread(self.store.current, key)
        context = await asyncio.to_thread(self._build_context, session, policy_for(key))
        totals = await asyncio.to_thread(self.store.usage_totals, session.id)
        index = await asyncio.to_thread(self.index.status)
        return AgentStatus(
            model=self.config.model,
            fallback_models=tuple(self.config.fallback_models),
            session=session,
            context_tokens=context.tokens,
            threshold=self.compactor.threshold,
            context_window=self.config.context_window,
            usage_totals=totals,
            index=index,
            project=self.projects.active(session),
        )

    # -- one turn ----------------------------------------------------------------------------

    async def _run_turn(
        self,
        request: AgentRequest,
        text: str,
        emit: Emit,
        notices: Sequence[str] = (),
    ) -> AgentReply:
        key = request.key
        policy = policy_for(key, request.sender)
        session = await asyncio.to_thread(self.store.current, key)
        media = None  # voice notes become text here, so the length rule below applies to them
        if self.media is not None and request.attachments:
            media = await self.media.prepare(text, request.attachments, session_id=session.id)
            text, notices = media.text, [*notices, *media.notices]
        text, too_long = fit_message(text, self.config)  # cut once, before it is stored or sent
        notices = [*notices, too_long] if too_long else notices
        content = user_content(request, text, media.attachments if media else None)
        # Only the owner's own words in the owner's direct chat (never automation or system).
        recall = policy.owner_private and request.sender == "owner"
        recalled = await self._recall(key, text) if recall else None
        blocks = [render("recalled", text=recalled)] if recalled else []
        project = self.projects.active(session)
        if intents := await self._standing_intents(request, text, project):
            blocks.append(intents)
        if blocks:
            content["recalled"] = "\n\n".join(blocks)
        await asyncio.to_thread(self.store.append, session.id, "user", content)
        turn = _Turn(
            key, session, content, policy, emit, notices=list(notices), channel=request.channel
        )
        turn.project = project
        if media is not None and media.outside_text:
            turn.taint.mark("document")  # a document's text is outside content
        for notice in notices:
            emit(Notice(notice))
        answer = await self._tool_loop(turn)
        text_out = "\n\n".join([*turn.notices, answer])
        return AgentReply(
            text_out,
            turn.session.id,
            turn.usage,
            turn.model,
            compacted=turn.compacted,
            cut_off=turn.cut_off,
        )

    async def _resume(self, request: AgentRequest, emit: Emit) -> AgentReply | None:
        """Finish the turn a stopped process began for `request`, from its transcript; None when
        the transcript does not end in this request's messages (then it is a new message)."""
        key = request.key
        session = await asyncio.to_thread(self.store.current, key)
        users = await asyncio.to_thread(self.store.events, session.id, kinds=("user",))
        if not users or not same_turn(users[-1].content, request):
            return None
        tail = await asyncio.to_thread(self.store.events, session.id, after_seq=users[-1].seq)
        if tail and tail[-1].kind == "assistant":  # answered; only the delivery was missing
            return AgentReply(str(tail[-1].content.get("text", "")), session.id)

        def text_only(event: AgentEvent) -> None:  # the notices were said the first time
            if isinstance(event, TextDelta):
                emit(event)

        policy = policy_for(key, request.sender)
        turn = _Turn(key, session, dict(users[-1].content), policy, text_only)
        turn.project = self.projects.active(session)
        answer = await self._tool_loop(turn)
        return AgentReply(
            answer,
            turn.session.id,
            turn.usage,
            turn.model,
            compacted=turn.compacted,
            cut_off=turn.cut_off,
        )

    async def _tool_loop(self, turn: _Turn) -> str:
        """Call the model and run the tools it asks for until it answers; returns the answer.

        After `max_tool_rounds` rounds of tools, further calls are refused with a result asking
        for an answer; a model that still calls tools gets one more request, then is cut off.
        """
        rounds = self.config.max_tool_rounds
        for round_ in range(rounds + 2):
            response = await self._complete(turn)
            await asyncio.to_thread(store_response, self.store, turn.session.id, response)
            if response.cut_off:  # stored marked incomplete; the owner is told why
                return _with_cut_off_notice(turn, response)
            if not response.tool_calls:
                return response.text.strip() or EMPTY_ANSWER
            if round_ > rounds:
                break
            await self._run_tools(turn, response.tool_calls, refuse=round_ == rounds)
        return response.text.strip() or TOOL_LOOP_STOPPED

    async def _recall(self, key: SessionKey, text: str) -> str | None:
        if self.recall is None:
            return None
        try:
            return await self.recall(key, text)
        except Exception:  # recall is a bonus; the message is answered without it
            log.warning("Recall failed; answering without recalled context", exc_info=True)
            return None

    async def _standing_intents(
        self, request: AgentRequest, text: str, project: str | None
    ) -> str | None:
        # Matched in the message's own scope (memory/lifecycle/intents.py), whatever the policy.
        now = self.clock.now().timestamp()
        try:
            return await asyncio.to_thread(
                standing_intents_block, self.intents, request, text, now=now, project=project
            )
        except Exception:  # a reminder is a bonus; the message is answered without it
            log.warning("Standing intents failed; answering without them", exc_info=True)
            return None

    async def _complete(self, turn: _Turn) -> ModelResponse:
        """One model call for the turn, compacting first if the context is too big."""
        context = await asyncio.to_thread(
            self._build_context, turn.session, turn.policy, turn.channel
        )
        if self.compactor.needs_compaction(context):
            context = await self._compact(turn, context)
        try:
            return await self._call(turn, context)
        except ContextTooLongError as exc:
            if len(context.history.turns) <= 1:
                raise  # only this message: compacting or a new session cannot make it shorter
            log.info("The server found the prompt too long; compacting: %s", exc)
            context = await self._compact(turn, context)
            return await self._call(turn, context)

    async def _call(self, turn: _Turn, context: Context) -> ModelResponse:
        request = context.request(max_tokens=self.config.max_output_tokens)
        response = await self.model.complete(request, lambda text: turn.emit(TextDelta(text)))
        turn.usage += response.usage
        turn.model = response.model
        return response

    async def _compact(self, turn: _Turn, context: Context) -> Context:
        """Flush memory, then summarise (on failure: a fresh session); returns the new context.

        Only the owner's direct chats flush into the owner's daily log; any other conversation
        keeps its memory in its own transcript, which compaction indexes."""
        if turn.policy.writes_memory:
            flush = await self.compactor.flush_memory(
                turn.session, context, today=self.clock.now().date(), project=turn.project
            )
            turn.usage += flush.usage
        try:
            turn.session, usage = await self.compactor.compact(turn.session)
            turn.usage += usage
            turn.compacted = True
        except CompactionError as exc:
            log.warning("Compaction failed; starting a fresh session: %s", exc)
            await self._reset_after_failure(turn)
        return await asyncio.to_thread(self._build_context, turn.session, turn.policy, turn.channel)

    async def _reset_after_failure(self, turn: _Turn) -> None:
        await self.compactor.index_transcript(turn.session)  # nothing said is lost to search
        turn.session = await asyncio.to_thread(self.store.reset, turn.key, turn.session.project)
        await asyncio.to_thread(self.store.append, turn.session.id, "user", turn.user_content)
        turn.notices.append(RESET_NOTICE)
        turn.emit(Notice(RESET_NOTICE))

    async def _run_tools(self, turn: _Turn, calls: Sequence[ToolCall], *, refuse: bool) -> None:
        attachments: frozenset[str] = frozenset()
        if not turn.policy.owner_private:  # shared sessions may read what was sent to them
            attachments = await asyncio.to_thread(session_attachments, self.store, turn.session.id)
        ctx = ToolContext(
            turn.key, turn.session.id, turn.policy, attachments, turn.taint, turn.project
        )
        if refuse:
            results = [ToolResult(c.id, TOOL_LIMIT_RESULT, is_error=True) for c in calls]
        else:
            results = list(await asyncio.gather(*(self.tools.call(c, ctx) for c in calls)))
        await asyncio.to_thread(store_results, self.store, turn.session.id, results)

    # -- the transcript ----------------------------------------------------------------------

    def _build_context(
        self, session: Session, policy: SessionPolicy, channel: str | None = None
    ) -> Context:
        latest = self.store.latest_compaction(session.id)
        first_kept = int(latest.content["first_kept_seq"]) if latest else 0
        summary = (
            summary_block(str(latest.content["summary"]), session.id, first_kept)
            if latest
            else None
        )
        events = self.store.events(session.id, after_seq=max(0, first_kept - 1))
        history = build_history(events, summary, first_kept)
        if self.media is not None and self.media.sends_images:  # the newest turn's, from inbox/
            history = history.with_images(lambda ref: load_image(self.workspace, ref))
        return self.context_builder.build(
            session.key,
            history,
            self.tools.specs,
            today=self.clock.now().date(),
            timezone=self.clock.zone_name,
            policy=policy,
            channel=channel,
            provided=self.tools.provided_specs(session.key, policy),
            project=self.projects.active(session),
        )


def _with_cut_off_notice(turn: _Turn, response: ModelResponse) -> str:
    """The partial answer and the notice saying it was cut off (streamed after the partial)."""
    notice = cut_off_notice(response.cut_off or "")
    turn.cut_off = True
    turn.emit(TextDelta("\n\n" + notice))
    return f"{response.text.rstrip()}\n\n{notice}"
