"""The gateway's one way into the agent: `run_turn(runtime, request, on_text)`.

Everything the gateway knows about the agent's API is in this module: the typed entry
(`Agent.run(AgentRequest)`, streamed events; a request marked `resumed` finishes a turn that a
stopped gateway began) and the `TurnResult` the gateway delivers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agent.requests import AgentRequest, Final, Notice, TextDelta
from app.process import Runtime

SILENT = "NO_REPLY"  # an answer that means "say nothing"

__all__ = ["Runtime", "TurnResult", "run_turn"]


@dataclass(frozen=True)
class TurnResult:
    text: str
    command: str | None = None
    cut_off: bool = False  # the answer stopped early

    @property
    def silent(self) -> bool:
        return not self.text.strip() or self.text.strip() == SILENT


async def run_turn(
    runtime: Runtime, request: AgentRequest, on_text: Callable[[str], None]
) -> TurnResult:
    """Answer `request`, streaming text to `on_text`. Raises ModelError / MemoryError_ (worded
    as advice) when it cannot."""
    async for event in runtime.agent.run(request):
        if isinstance(event, TextDelta):
            on_text(event.text)
        elif isinstance(event, Notice):
            on_text(event.text + "\n\n")
        elif isinstance(event, Final):
            return TurnResult(event.reply.text, event.reply.command, event.reply.cut_off)
    raise RuntimeError("the agent ended a turn without its Final event")
