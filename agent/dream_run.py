"""Dreaming's model step and one whole run: light → REM → deep → write → diary.

The model only chooses, per gated candidate, `added`, `merged` or `superseded` (a small JSON
answer); anything else skips that candidate. The program builds the text
(memory/lifecycle/dreaming.py).
A run stops asking the model after `max_model_calls` calls or `max_tokens` tokens, holds a
database lease so two runs never overlap, and does nothing at all when `enabled` is false.

    report = await dream(index.db, workspace, model, config, budget_chars=20_000)
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from agent.model.base import ModelClient
from agent.model.errors import (
    AuthenticationFailedError,
    MissingKeyError,
    ModelError,
    UnknownModelError,
)
from agent.prompts import render
from agent.types import Message, ModelRequest
from memory.files.atomic import read_workspace_text
from memory.lifecycle.dreaming import (
    MEMORY_FILE,
    DreamingConfig,
    PromotionDecision,
    Reinforced,
    WriteResult,
    acquire_lease,
    append_diary,
    build_append,
    check_writable,
    finish_run,
    gate,
    memory_entries,
    reinforce,
    release_lease,
    stage_candidates,
    start_run,
    write_memory,
)
from memory.lifecycle.signals import prune_signals
from memory.store.db import Database
from memory.text import estimate_tokens

log = logging.getLogger(__name__)

Phase = Literal["light", "rem", "deep"]
ANSWER_TOKENS = 60
DISABLED_NOTE = "Dreaming is disabled ([dreaming] enabled = false): nothing was done."
_JSON = re.compile(r"\{.*?\}", re.DOTALL)
_THRESHOLD_FIGURE = re.compile(r" [\d.]+ (?=[<>])")  # "recalls 1 < 3" → "recalls < 3"
# A model that fails like this fails every call alike: the run stops before writing anything.
OWNER_MUST_FIX = (MissingKeyError, AuthenticationFailedError, UnknownModelError)


@dataclass
class DreamReport:
    """What one run found and did; `lines()` is what the CLI and DREAMS.md show."""

    phase: Phase
    dry_run: bool
    ran: bool = True
    candidates: list[Reinforced] = field(default_factory=list)
    decisions: list[PromotionDecision] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # candidate key → why
    model_calls: int = 0
    tokens: int = 0
    write: WriteResult | None = None
    note: str = ""

    @property
    def promoted(self) -> int:
        return len(self.decisions) if self.write is not None else 0

    def outcome(self) -> str:
        """What the run came to, in one line: what it promoted, or why nothing."""
        n = len(self.candidates)
        if self.promoted:
            assert self.write is not None
            return f"promoted {self.promoted} of {n} candidates ({self.write.mode})"
        if not n:
            return "nothing promoted: no new notes in the recent daily logs and session notes"
        passed = [r for r in self.candidates if not r.failed]
        if not passed:
            failed = [f for r in self.candidates for f in r.failed]
            missed = Counter(_THRESHOLD_FIGURE.sub(" ", f) for f in failed)
            most = ", ".join(f"{why} ({k})" for why, k in missed.most_common(2))
            return f"nothing promoted: none of {n} candidates passed the gate (missed: {most})"
        reasons = Counter(self.skipped.values())
        why = reasons.most_common(1)[0][0] if reasons else "no decision"
        return f"nothing promoted: {len(passed)} of {n} candidates passed the gate, skipped: {why}"

    def lines(self) -> list[str]:
        if not self.ran:
            return [self.note]
        out = [
            f"{len(self.candidates)} candidates; model calls {self.model_calls}, "
            f"tokens {self.tokens}" + (" (dry run: nothing written)" if self.dry_run else "")
        ]
        decided = {d.item.candidate.key: d for d in self.decisions}
        for r in self.candidates:
            c = r.candidate
            figures = (
                f"score {r.score:.2f}, {r.recalls} recalls, {r.queries} queries, {r.days} days"
            )
            snippet = " ".join(c.text.split())[:70]
            if c.key in decided:
                d = decided[c.key]
                verb = "would be " + d.action if self.dry_run or self.write is None else d.action
                status = verb + (f" (entry {d.target})" if d.target is not None else "")
            elif r.failed:
                status = "not promoted: " + "; ".join(r.failed)
            elif c.key in self.skipped:
                status = "skipped: " + self.skipped[c.key]
            else:
                status = "passes the gate" if self.phase == "deep" else "staged"
            theme = f" [theme: {r.theme}]" if r.theme else ""
            out.append(f"- {c.source}{theme}: {snippet!r} — {figures} → {status}")
        if self.write is not None:
            out.append(f"MEMORY.md: {self.write.mode}, previous copy {self.write.preimage}")
        if self.note:
            out.append(self.note)
        return out


async def choose(
    model: ModelClient, r: Reinforced, entries: list[str], max_tokens: int
) -> tuple[PromotionDecision | None, int]:
    """Ask the model what to do with one candidate; (decision or None if invalid, tokens used)."""
    prompt = render("dream", entries=entries, source=r.candidate.source, note=r.candidate.text)
    request = ModelRequest(
        messages=(Message.user(prompt),), max_tokens=min(ANSWER_TOKENS, max_tokens)
    )
    response = await model.complete(request)
    used = response.usage.prompt_tokens + response.usage.output_tokens
    used = used or estimate_tokens(prompt) + estimate_tokens(response.text)
    return parse_choice(response.text, r, len(entries)), used


def parse_choice(text: str, r: Reinforced, n_entries: int) -> PromotionDecision | None:
    """The decision in a model's answer, or None when it is not a valid one."""
    m = _JSON.search(text)
    if not m:
        return None
    try:
        data = json.loads(m.group(0))
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    action = data.get("action")
    if action == "added":
        return PromotionDecision(r, "added")
    target = data.get("entry")
    valid = isinstance(target, int) and not isinstance(target, bool) and 0 <= target < n_entries
    if action in ("merged", "superseded") and valid:
        return PromotionDecision(r, action, target)
    return None


async def dream(
    db: Database,
    workspace: Path,
    model: ModelClient | None,
    config: DreamingConfig,
    *,
    budget_chars: int,
    phase: Phase = "deep",
    dry_run: bool = False,
    now: datetime | None = None,
    before_write: Callable[[], None] | None = None,
) -> DreamReport:
    """One dream. Light and REM only read; deep asks the model (if any) and, unless `dry_run`,
    writes MEMORY.md and DREAMS.md. Raises DreamBusyError if another run holds the lease, and
    the model's error, before anything is written, when it fails in a way every call would
    (`OWNER_MUST_FIX`: no key, key rejected, unknown model)."""
    report = DreamReport(phase, dry_run)
    if not config.enabled:
        report.ran = False
        report.note = DISABLED_NOTE
        return report
    moment = now or datetime.now().astimezone()
    holder = None if dry_run else await asyncio.to_thread(acquire_lease, db, lease_s=config.lease_s)
    try:
        await _phases(db, workspace, model, config, report, budget_chars, moment, before_write)
    finally:
        if holder is not None:
            await asyncio.to_thread(release_lease, db, holder)
    return report


async def _phases(
    db: Database,
    workspace: Path,
    model: ModelClient | None,
    config: DreamingConfig,
    report: DreamReport,
    budget_chars: int,
    now: datetime,
    before_write: Callable[[], None] | None,
) -> None:
    today = now.date().isoformat()
    staged = await asyncio.to_thread(
        stage_candidates, db, workspace, today=today, lookback_days=config.lookback_days
    )
    report.candidates = await asyncio.to_thread(reinforce, db, staged)
    if report.phase == "light":
        for r in report.candidates:
            r.failed = []
        return
    passing = gate(report.candidates, config)
    if report.phase == "rem":
        return
    started = time.time()
    if not report.dry_run:  # before any model call and any write
        await asyncio.to_thread(check_writable, workspace)
    before = await asyncio.to_thread(read_workspace_text, workspace, MEMORY_FILE)
    entries = [line for _, line in memory_entries(before or "")]
    for r in passing:
        if report.model_calls >= config.max_model_calls:
            report.skipped[r.candidate.key] = f"model call cap {config.max_model_calls} reached"
            continue
        if report.tokens >= config.max_tokens:
            report.skipped[r.candidate.key] = f"token cap {config.max_tokens} reached"
            continue
        # Appending is the longest outcome (merging or superseding writes less): check that.
        if (
            len(build_append(before or "", [*report.decisions, PromotionDecision(r, "added")]))
            > budget_chars
        ):
            report.skipped[r.candidate.key] = f"MEMORY.md budget {budget_chars} chars reached"
            continue
        if model is None:
            decision: PromotionDecision | None = PromotionDecision(r, "added")
        else:
            report.model_calls += 1
            try:
                decision, used = await choose(model, r, entries, config.max_tokens - report.tokens)
            except OWNER_MUST_FIX:
                raise  # every other call would fail the same way: stop, write nothing
            except ModelError as exc:
                report.skipped[r.candidate.key] = f"model error: {exc}"
                continue
            report.tokens += used
        if decision is None:
            report.skipped[r.candidate.key] = "the model's answer was not a valid choice"
            continue
        if any(d.target is not None and d.target == decision.target for d in report.decisions):
            decision = PromotionDecision(r, "added")  # one change per prior entry
        report.decisions.append(decision)
    if report.dry_run:
        return
    run_id = await asyncio.to_thread(start_run, db, "deep", started_at=started)
    # Signals older than what a candidate can still be staged from are of no further use.
    oldest = (now.date() - timedelta(days=2 * config.lookback_days)).isoformat()
    await asyncio.to_thread(prune_signals, db, oldest)
    if report.decisions:
        report.write = await asyncio.to_thread(
            write_memory,
            workspace,
            report.decisions,
            before=before,
            config=config,
            budget_chars=budget_chars,
            now=now,
            before_write=before_write,
        )
        report.note = report.write.note
    await asyncio.to_thread(
        finish_run,
        db,
        run_id,
        promoted=report.promoted,
        model_calls=report.model_calls,
        tokens=report.tokens,
        write=report.write,
        outcome=report.outcome(),
    )
    diary = "\n".join([f"## {now:%Y-%m-%d %H:%M} dream #{run_id}", "", *report.lines()])
    await asyncio.to_thread(append_diary, workspace, diary)
