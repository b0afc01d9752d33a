"""Active Memory: what Pinch recalls by itself before it answers the owner.

    memory = ActiveMemory(model=model, store=store, tools=agent.tools, workspace=ws, config=cfg)
    agent.recall = memory                      # the runtime calls it in the owner's turns only
    text = await memory(key, "What did we decide about the trip?")   # → the recalled block, or None
    memory.last_turn(key)                      # what it did, for /status

Two lanes, chosen by `[agent] recall_mode`:

- **Fast path** (every mode but "off"; no model call, a few milliseconds): the entries of
  MEMORY.md and USER.md tagged `<!-- trigger: … -->` that match the message strongly
  (memory/lifecycle/triggers.py), at most `MAX_FAST_HITS`, the best first.
- **Deep recall** ("escalate": when the message asks about the past, or is a question one line
  of the owner's memory holds most of the words of (`memory_holds`), and the fast path found
  nothing strong; "always": whenever the fast path found nothing strong): one bounded sub-call to
  the model with only memory_search, memory_get and transcript_read, the last two user and one
  assistant turns for context, at most `DEEP_ROUNDS` model calls, all of it inside a hard
  `recall_timeout_s` (asyncio.timeout — the reply goes on without it). It answers a summary of at
  most `SUMMARY_CHARS` characters, or NONE, which injects nothing: not finding something is never
  presented as its absence. Results are cached for `CACHE_S` per (session, message); after
  `BREAKER_TIMEOUTS` timeouts in a row deep recall is off for `BREAKER_OPEN_S`.

Only the owner's own messages in the owner's direct chats get either lane: the runtime asks
the policy and the sender, and this module checks the policy again. Deep recall searches the
owner's memory without untrusted chunks (fetched pages, other people's words, tool output), and
reads files and transcripts — its recent turns too — with untrusted text left out: none of it
can reach a summary.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent.agent_config import AgentConfig
from agent.model.factory import ModelClient
from agent.policy import policy_for
from agent.projects import ProjectDirectory
from agent.prompts import render
from agent.recall_intent import recall_intent
from agent.tools import ToolContext, ToolRegistry
from agent.types import Message, ModelRequest, ToolCall, ToolResult, Usage
from common.text import shorten
from memory.index.index import MemoryIndex
from memory.lifecycle.triggers import STRONG_MATCH, TriggerFiles, TriggerHit
from memory.search.feedback import feedback_terms
from memory.store.sessions import SessionKey, SessionStore
from memory.store.transcripts import UNTRUSTED_LEFT_OUT, untrusted_seqs
from memory.text import line_terms, query_terms, stem_term

log = logging.getLogger(__name__)

MAX_FAST_HITS = 3
FAST_ENTRY_CHARS = 400  # one recalled entry, at most
DEEP_TOOLS = frozenset({"memory_search", "memory_get", "transcript_read"})
DEEP_ROUNDS = 3  # model calls of one deep recall; tools run after all but the last
DEEP_MAX_TOKENS = 400
# The summary's budget. 400 held two of the owner's chatty lines: on the survival bench's 50
# reworded questions the sub-call read 43 facts but its summary kept 38 — each of the other five
# was the 3rd–6th line by meaning, behind longer lines of chit-chat — and a real model is also
# asked for each fact's date and path (a transcript path alone is 41 characters). 500: 38, 600:
# 42, 800: 42 (bench/RESULTS.md, 2026-12-02 h-am). ≈ 50 tokens more in front of a turn.
SUMMARY_CHARS = 600
# Deep recall's follow-up search (ActiveMemory._follow_up): this many words of the first
# search's best FOLLOW_UP_DOCS hits are added to its query; at most FOLLOW_UP_HITS new hits kept.
FOLLOW_UP_TERMS = 6
FOLLOW_UP_DOCS = 3
FOLLOW_UP_HITS = 4
CACHE_S = 15.0
BREAKER_TIMEOUTS = 3
BREAKER_OPEN_S = 60.0
TRUSTED_ORIGINS = frozenset({"owner", "agent", "system"})
NONE_ANSWER = "NONE"
# A "summary" that only reports finding nothing is not a finding (and must not read as "no").
_NOTHING_FOUND = re.compile(
    r"^\W*(?:none\b|nothing\b|no\s+(?:relevant|matching|record|memory|memories|information|"
    r"results?|mention|notes?)\b|(?:i\s+)?(?:could\s*n[o']?t|can\s*n[o']?t|did\s*n[o']?t)\s+find"
    r"|not\s+found|没有找到|未找到|找不到|没有相关|无相关)",
    re.IGNORECASE,
)

_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")

DeepOutcome = Literal[
    "off",  # recall_mode is "off" or "triggers"
    "skipped",  # not needed: no recall intent, or the fast path already had a strong hit
    "found",  # ran, and its summary was injected
    "none",  # ran, found nothing to say (nothing injected)
    "cached",  # the same message in the same session within CACHE_S: the earlier answer reused
    "timeout",  # cut off at recall_timeout_s; the reply went on without it
    "breaker-open",  # not run: too many timeouts lately
    "error",  # the sub-call failed (logged); the reply went on without it
]


@dataclass(frozen=True)
class RecallReport:
    """What recall did on one turn (shown by /status)."""

    fast_hits: int
    fast_ms: float
    deep: DeepOutcome
    deep_reason: str = ""  # why deep recall ran or was skipped
    deep_ms: float = 0.0
    deep_tokens: int = 0  # prompt + output tokens of the sub-call's model calls that finished

    def describe(self) -> str:
        fast = f"{self.fast_hits} trigger hit(s) in {self.fast_ms:.1f} ms"
        deep = {
            "off": "off",
            "skipped": f"skipped ({self.deep_reason})",
            "found": f"ran in {self.deep_ms / 1000:.1f} s, {self.deep_tokens:,} tokens, "
            f"summary injected ({self.deep_reason})",
            "none": f"ran in {self.deep_ms / 1000:.1f} s, {self.deep_tokens:,} tokens, "
            f"nothing found ({self.deep_reason})",
            "cached": "answered from the 15 s cache",
            "timeout": f"timed out after {self.deep_ms / 1000:.1f} s; replied without it",
            "breaker-open": "paused after repeated timeouts (circuit breaker open)",
            "error": f"failed ({self.deep_reason}); replied without it",
        }[self.deep]
        return f"Recall (your last message): {fast}; deep recall {deep}"


class ActiveMemory:
    """The `Recall` function of the runtime (agent/runtime.py), with its caches and breaker."""

    def __init__(
        self,
        *,
        model: ModelClient,
        store: SessionStore,
        tools: ToolRegistry,
        workspace: Path,
        config: AgentConfig,
        index: MemoryIndex | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        projects: ProjectDirectory | None = None,
    ) -> None:
        self.model = model
        self.index = index  # for `memory_holds` (escalate); without it only the detector decides
        self.store = store
        self.tools = tools
        self.config = config
        self.triggers = TriggerFiles(workspace)
        self.projects = projects or ProjectDirectory()  # a tagged trigger needs its project
        self._now = monotonic
        self._triggers_lock = threading.Lock()
        self._cache: dict[tuple[str, str], tuple[float, str | None]] = {}
        self._timeouts = 0
        self._open_until = 0.0
        self._reports: dict[str, RecallReport] = {}
        self.deep_calls = 0  # sub-calls started (for tests and the benchmark)
        # Deep recall's follow-up search: off (0) — measured, not adopted (bench/RESULTS.md,
        # 2026-12-02 h-recall2: no gain on reworded questions; ≈ 1,000 more tokens a recall).
        # FOLLOW_UP_TERMS turns it on.
        self.follow_up_terms = 0
        # Results of the sub-call's memory_search when the model names no max_results (None:
        # the tool's own default, 6). Measured, not adopted: bench/RESULTS.md h-recall3.
        self.search_results: int | None = None

    def _sized(self, call: ToolCall) -> ToolCall:
        """`call` with `search_results` as its max_results, for a memory_search naming none."""
        if self.search_results is None or call.name != "memory_search":
            return call
        if call.input.get("max_results"):
            return call
        return dataclasses.replace(call, input={**call.input, "max_results": self.search_results})

    def last_turn(self, key: SessionKey) -> RecallReport | None:
        """What recall did on `key`'s last turn that asked for it (None: nothing yet)."""
        return self._reports.get(str(key))

    async def __call__(self, key: SessionKey, message: str) -> str | None:
        mode = self.config.recall_mode
        if mode == "off" or not policy_for(key).owner_private:
            return None
        started = self._now()
        try:
            session = await asyncio.to_thread(self.store.current, key)
            project = self.projects.active(session)
            hits = await asyncio.to_thread(self.fast_hits, message, project)
        except OSError:  # an unreadable MEMORY.md/USER.md must not also cost deep recall
            log.warning("Could not read the trigger entries; skipping them", exc_info=True)
            hits = []
        fast_ms = (self._now() - started) * 1000
        parts = [_render_hit(h) for h in hits]
        report = RecallReport(len(hits), fast_ms, "off")
        if mode in ("escalate", "always"):
            summary, report = await self._deep(key, message, report, strong=bool(hits))
            if summary:
                parts.append(f"From a search of memory and past conversations: {summary}")
        self._reports[str(key)] = report
        return "\n".join(parts) or None

    def fast_hits(self, message: str, project: str | None = None) -> list[TriggerHit]:
        """The strong trigger matches of `message`, best first, at most MAX_FAST_HITS; an entry
        tagged with a project only while `project` is active. Blocks (stats the curated files;
        re-reads one that changed)."""
        with self._triggers_lock:
            index = self.triggers.index()
        return index.match(message, min_score=STRONG_MATCH, project=project)[:MAX_FAST_HITS]

    def memory_holds(self, key: SessionKey, message: str) -> bool:
        """Whether one line of the owner's trusted memory holds most (≥ STRONG_MATCH) of the
        message's distinct words: a question about the present that Pinch was once told the
        answer to ("What's the cabin Wi-Fi called?"), which the detector alone cannot tell from
        a general one. One keyword search (milliseconds, no model); the owner's earlier
        questions do not count (a question states nothing). Blocks."""
        if self.index is None:
            return False
        terms = {stem_term(t) for t in query_terms(message)}
        if len(terms) < 2:
            return False
        try:
            hits = self.index.search(  # a check, not a recall: no signal for Dreaming
                message, preset="keyword", filter=policy_for(key).search.trusted(), record=False
            )
        except Exception:  # recall is a bonus: a search problem costs only this shortcut
            log.warning("The memory check for deep recall failed; skipping it", exc_info=True)
            return False
        return any(
            len(terms & line_terms(line)) >= STRONG_MATCH * len(terms)
            for hit in hits
            for line in hit.snippet.split("\n")
            if not line.rstrip().endswith(("?", "？"))
        )

    # -- deep recall -------------------------------------------------------------------------

    async def _deep(
        self, key: SessionKey, message: str, report: RecallReport, *, strong: bool
    ) -> tuple[str | None, RecallReport]:
        spent: list[Usage] = []

        def done(outcome: DeepOutcome, reason: str = "", ms: float = 0.0) -> RecallReport:
            tokens = sum(u.prompt_tokens + u.output_tokens for u in spent)
            return dataclasses.replace(
                report, deep=outcome, deep_reason=reason, deep_ms=ms, deep_tokens=tokens
            )

        if strong:
            return None, done("skipped", "a trigger matched strongly")
        if self.config.recall_mode == "escalate":
            intent = recall_intent(message)
            if intent:
                reason = intent.reason
            elif intent.reason == "question about the present" and await asyncio.to_thread(
                self.memory_holds, key, message
            ):
                reason = "a line of memory holds most of the question's words"
            else:
                return None, done("skipped", f"no recall intent: {intent.reason}")
        else:
            reason = "recall_mode always"
        now = self._now()
        cache_key = (str(key), message.strip())
        cached = self._cache.get(cache_key)
        if cached is not None and now - cached[0] < CACHE_S:
            return cached[1], done("cached", reason)
        if now < self._open_until:
            return None, done("breaker-open", reason)
        self._cache = {k: v for k, v in self._cache.items() if now - v[0] < CACHE_S}
        self.deep_calls += 1
        try:
            async with asyncio.timeout(self.config.recall_timeout_s):
                summary = await self._sub_call(key, message, spent)
        except TimeoutError:
            self._timeouts += 1
            if self._timeouts >= BREAKER_TIMEOUTS:
                self._open_until = self._now() + BREAKER_OPEN_S
                self._timeouts = 0
                log.warning("Deep recall timed out %d times; pausing it", BREAKER_TIMEOUTS)
            return None, done("timeout", reason, (self._now() - now) * 1000)
        except Exception as exc:  # recall is a bonus: the reply goes on without it
            log.warning("Deep recall failed; answering without it", exc_info=True)
            return None, done("error", type(exc).__name__, (self._now() - now) * 1000)
        self._timeouts = 0
        self._cache[cache_key] = (self._now(), summary)
        outcome: DeepOutcome = "found" if summary else "none"
        return summary, done(outcome, reason, (self._now() - now) * 1000)

    async def _sub_call(self, key: SessionKey, message: str, spent: list[Usage]) -> str | None:
        session = await asyncio.to_thread(self.store.current, key)
        recent = await asyncio.to_thread(recent_turns, self.store, session.id)
        owner = policy_for(key)
        # Trusted origins only: memory_search drops untrusted chunks, and memory_get and
        # transcript_read leave untrusted text out (SearchFilter.trusted_only).
        policy = dataclasses.replace(
            owner, search=dataclasses.replace(owner.search, origins=TRUSTED_ORIGINS)
        )
        ctx = ToolContext(key, session.id, policy, project=self.projects.active(session))
        system = render("recall", rounds=DEEP_ROUNDS - 1, max_chars=SUMMARY_CHARS)
        specs = tuple(s for s in self.tools.specs if s.name in DEEP_TOOLS)
        messages = [Message.user(_render_request(recent, message))]
        for round_ in range(DEEP_ROUNDS):
            request = ModelRequest(
                tuple(messages), system, specs, DEEP_MAX_TOKENS, cache_prefix=False
            )
            response = await self.model.complete(request)
            spent.append(response.usage)
            if not response.tool_calls:
                return clean_summary(response.text)
            if round_ == DEEP_ROUNDS - 1:
                break
            calls = [self._sized(call) for call in response.tool_calls]
            results = [await self.tools.call(call, ctx, allowed=DEEP_TOOLS) for call in calls]
            if round_ == 0 and self.follow_up_terms:
                results = [
                    await self._follow_up(call, result, ctx)
                    for call, result in zip(response.tool_calls, results, strict=True)
                ]
            messages += [response.to_message(), Message.tool_results(results)]
        return clean_summary(response.text)

    async def _follow_up(self, call: ToolCall, result: ToolResult, ctx: ToolContext) -> ToolResult:
        """Deep recall's follow-up to the sub-call's first memory_search: a second search of
        its query plus the words its best hits share (memory/search/feedback.py), and at most
        FOLLOW_UP_HITS hits it finds that the first did not, added to the same result — the
        other half of a question whose evidence is in two places, or the note a reworded
        question missed but its neighbours' words find. No model call; one search."""
        if call.name != "memory_search" or result.is_error:
            return result
        try:
            answer = json.loads(result.content)
        except json.JSONDecodeError:
            return result
        hits = answer.get("results") or []
        query = str(call.input.get("query") or "").strip()
        if not hits or not query:
            return result
        snippets = [str(h.get("snippet", "")) for h in hits]
        extra = feedback_terms(
            snippets[:FOLLOW_UP_DOCS], snippets, query_terms(query), self.follow_up_terms
        )
        if not extra:
            return result
        args = {**call.input, "query": f"{query} {' '.join(extra)}"}
        more = await self.tools.call(
            ToolCall(f"{call.id}-more", "memory_search", args), ctx, allowed=DEEP_TOOLS
        )
        if more.is_error:
            return result
        seen = {(h.get("path"), h.get("lines")) for h in hits}
        new = [
            h
            for h in json.loads(more.content).get("results", [])
            if (h.get("path"), h.get("lines")) not in seen
        ][:FOLLOW_UP_HITS]
        if not new:
            return result
        answer["results"] = hits + new
        answer["follow_up"] = f"The last {len(new)} results: a second search with {extra}."
        return dataclasses.replace(result, content=json.dumps(answer, ensure_ascii=False))


def clean_summary(text: str) -> str | None:
    """The summary to inject, or None for NONE / "nothing found" / empty. At most
    SUMMARY_CHARS characters (cut at a word, marked with …)."""
    text = " ".join(text.split())
    if not text or text.upper().startswith(NONE_ANSWER) or _NOTHING_FOUND.match(text):
        return None
    return shorten(text, SUMMARY_CHARS, at_space=True)


def recent_turns(store: SessionStore, session_id: str) -> list[tuple[str, str]]:
    """The last two user and one assistant message of a session, in order, as (role, text);
    one that may hold outside text (a reply after a fetched page) as UNTRUSTED_LEFT_OUT.
    Blocks (SQLite)."""
    everything = store.events(session_id)
    untrusted = untrusted_seqs(everything)
    events = [e for e in everything if e.kind in ("user", "assistant")]
    picked: list[tuple[int, str, str]] = []
    users = assistants = 0
    for event in reversed(events):
        text = str(event.content.get("text") or "").strip()
        if not text:
            continue
        if event.seq in untrusted:
            text = UNTRUSTED_LEFT_OUT
        if event.kind == "user" and users < 2:
            users += 1
            picked.append((event.seq, "user", text))
        elif event.kind == "assistant" and assistants < 1:
            assistants += 1
            picked.append((event.seq, "assistant", text))
        if users == 2 and assistants == 1:
            break
    return [(role, text) for _, role, text in sorted(picked)]


def _render_request(recent: list[tuple[str, str]], message: str) -> str:
    lines = [
        f"{'Owner' if role == 'user' else 'Assistant'}: {text[:1000]}" for role, text in recent
    ]
    earlier = "Recent conversation:\n" + "\n".join(lines) + "\n\n" if lines else ""
    return f"{earlier}The owner's newest message:\n{message}"


def _render_hit(hit: TriggerHit) -> str:
    text = _BULLET.sub("", hit.entry.text)
    text = shorten(text, FAST_ENTRY_CHARS)
    return f"- {text} ({hit.entry.path}, line {hit.entry.line})"
