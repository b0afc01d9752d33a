"""Standing intents in a turn: matched before every reply (no model call), injected into the
newest user message as a marked block, and the `intent` tool the owner's model manages them with.

`standing_intents_block(store, request, text, now=…)` finds the intents the message triggers in
its own scope (memory/lifecycle/intents.py checks agent, channel, chat and sender in SQL), keeps at
most
MAX_INJECTED within MAX_BLOCK_CHARS, records each fire atomically and renders the block
(agent/templates/intents.j2); None when nothing fires. It blocks on SQLite: call it in a thread.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from agent.prompts import render
from agent.requests import AgentRequest
from agent.tools import Tool, ToolContext, ToolFailure
from agent.types import ToolSpec
from common.clock import Clock
from common.text import shorten
from memory.lifecycle.intents import (
    DAY_S,
    DEFAULT_EXPIRY_S,
    DEFAULT_MAX_FIRES,
    IntentScope,
    IntentStore,
    StandingIntent,
)

MAX_INJECTED = 3
MAX_BLOCK_CHARS = 1_200
_TRIGGERS_SHOWN = 120  # characters of the trigger list in an injected line


def request_scope(request: AgentRequest, project: str | None = None) -> IntentScope:
    """The scope a message is said in: its conversation, who sent it, the active project."""
    return IntentScope.of(request.key, request.sender, request.sender_id, project)


def intent_line(intent: StandingIntent) -> str:
    """One intent as the model reads it in the block."""
    triggers = " / ".join(f'"{t}"' for t in intent.triggers)
    triggers = shorten(triggers, _TRIGGERS_SHOWN)
    return (
        f"#{intent.id} on {triggers} (fire {intent.fire_count + 1} of {intent.max_fires}): "
        f"{intent.action}"
    )


def standing_intents_block(
    store: IntentStore,
    request: AgentRequest,
    text: str,
    *,
    now: float,
    project: str | None = None,
) -> str | None:
    """Fire the intents `text` triggers in `request`'s scope and return the block to inject
    (None when none fires). An intent another message fired a moment ago is left out; one
    created in a project fires only while `project` (the active one) is that project."""
    # A few spares: another message may fire one first, or a line may not fit the budget.
    scope = request_scope(request, project)
    spares = store.candidates(scope, text, now=now, limit=3 * MAX_INJECTED)
    lines: list[str] = []
    while spares and len(lines) < MAX_INJECTED:
        chosen: dict[int, str] = {}
        while spares and len(lines) + len(chosen) < MAX_INJECTED:
            intent = spares.pop(0)
            line = intent_line(intent)
            if len(render("intents", lines=[*lines, *chosen.values(), line])) <= MAX_BLOCK_CHARS:
                chosen[intent.id] = line
        if not chosen:
            break
        fired = store.fire_all(list(chosen), now=now, session_key=str(request.key), excerpt=text)
        lines.extend(chosen[i] for i in fired)
    return render("intents", lines=lines) if lines else None


# ---- the tool ------------------------------------------------------------------------------

INTENT_SPEC = ToolSpec(
    "intent",
    'Standing intents: act when a later message here mentions something ("when Hangzhou '
    'comes up, remind me to…"). create: triggers are alternatives, each fires when all its '
    'words appear; scripts differ, so give each language, e.g. ["Hangzhou","杭州"]; do: what '
    "to do then. Defaults: at most 3 fires, 24 h apart, for 90 days. list; cancel by id.",
    {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["create", "list", "cancel"]},
            "triggers": {"type": "array", "items": {"type": "string"}},
            "do": {"type": "string"},
            "id": {"type": "integer"},
            "max_fires": {"type": "integer", "minimum": 1},
            "days": {"type": "integer", "minimum": 1},
        },
        "required": ["action"],
    },
)


class IntentTool:
    """The `intent` tool over one store. The policy offers it only in the owner's direct chats
    and runs it only on the owner's own message (agent/policy.py, OWNER_WORD_TOOLS)."""

    def __init__(
        self,
        store: IntentStore,
        clock: Clock,
        context_tainted: Callable[[ToolContext], bool] | None = None,
    ) -> None:
        """`context_tainted(ctx)` says whether fetched outside content is still in the
        conversation (it blocks; run in a thread); the turn's own taint is checked as well."""
        self.store = store
        self.clock = clock
        self.context_tainted = context_tainted

    def tool(self) -> Tool:
        return Tool(INTENT_SPEC, self.run)

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        if not ctx.policy.owner_private or ctx.policy.sender != "owner":
            raise ToolFailure("Standing intents are set by the owner, in the owner's own chat.")
        scope = IntentScope.of(ctx.key, "owner", project=ctx.project)
        if args["action"] != "list" and await self._tainted(ctx):
            # A fetched page could be speaking through the model: an intent puts words in
            # front of the owner's future messages, so it changes only without outside content.
            raise ToolFailure(
                "intent create/cancel is unavailable while fetched web content is in this "
                "conversation (it could be steering the request). The owner can ask again "
                "after /new, or use `pinch intents`."
            )
        match args["action"]:
            case "create":
                return await asyncio.to_thread(self._create, scope, args)
            case "list":
                return await asyncio.to_thread(self._list, scope)
            case _:
                return await asyncio.to_thread(self._cancel, args)

    async def _tainted(self, ctx: ToolContext) -> bool:
        if ctx.taint.tainted:
            return True
        if self.context_tainted is None:
            return False
        return await asyncio.to_thread(self.context_tainted, ctx)

    def _now(self) -> float:
        return self.clock.now().timestamp()

    def _create(self, scope: IntentScope, args: Mapping[str, Any]) -> str:
        triggers = args.get("triggers") or []
        if not isinstance(triggers, list) or not all(isinstance(t, str) for t in triggers):
            raise ToolFailure('triggers must be a list of strings, e.g. ["Hangzhou", "杭州"].')
        days = args.get("days")
        intent = self.store.create(
            scope,
            triggers,
            str(args.get("do") or ""),
            now=self._now(),
            max_fires=int(args.get("max_fires") or DEFAULT_MAX_FIRES),
            expires_in_s=days * DAY_S if days else DEFAULT_EXPIRY_S,
        )
        until = datetime.fromtimestamp(intent.expires_at, self.clock.tz)
        hours = intent.cooldown_s / 3600
        where = f"in this chat, project {scope.project}" if scope.project else "in this chat"
        return (
            f"Standing intent #{intent.id} armed {where}: when a message mentions "
            f"{' or '.join(repr(t) for t in intent.triggers)}: {intent.action}. Fires at most "
            f"{intent.max_fires} times, at least {hours:g} h apart, until {until:%Y-%m-%d}."
        )

    def _list(self, scope: IntentScope) -> str:
        self.store.expire_due(now=self._now())
        intents = self.store.intents(scope=scope)
        if not intents:
            return "No standing intents in this chat."
        return json.dumps(
            [
                {
                    "id": i.id,
                    "triggers": list(i.triggers),
                    "do": i.action,
                    "state": i.state,
                    **({"project": i.scope.project} if i.scope.project else {}),
                    "fired": f"{i.fire_count} of {i.max_fires}",
                    "expires": f"{datetime.fromtimestamp(i.expires_at, self.clock.tz):%Y-%m-%d}",
                }
                for i in intents
            ],
            ensure_ascii=False,
        )

    def _cancel(self, args: Mapping[str, Any]) -> str:
        if not isinstance(args.get("id"), int):
            raise ToolFailure("cancel needs the id of the intent (see action list).")
        intent = self.store.cancel(int(args["id"]), now=self._now())
        return (
            f"Standing intent #{intent.id} cancelled (fired {intent.fire_count} of "
            f"{intent.max_fires} times); its history is kept."
        )
