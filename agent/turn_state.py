"""`TurnState`: the mutable state of one turn of `Agent` (agent/runtime.py) — its session may
change if compaction has to reset it — and `Emit`, how a turn reports its events."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.policy import SessionPolicy
from agent.requests import AgentEvent
from agent.tools import TurnTaint
from agent.types import Usage
from memory.store.sessions import Session, SessionKey

Emit = Callable[[AgentEvent], None]


@dataclass
class TurnState:
    """The mutable state of one turn: its session may change if compaction has to reset it."""

    key: SessionKey
    session: Session
    user_content: dict[str, Any]
    policy: SessionPolicy
    emit: Emit
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    compacted: bool = False
    notices: list[str] = field(default_factory=list)
    taint: TurnTaint = field(default_factory=TurnTaint)  # set once the turn reads outside text
    channel: str | None = None  # where the message arrived, for the format hint
    cut_off: bool = False  # the answer stopped early
    project: str | None = None  # the session's active project (agent/projects.py)
