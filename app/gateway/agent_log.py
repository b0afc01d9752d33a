"""Whose log line is it, when one gateway process serves several agents: the agent being served
is a context variable set when its service starts, so everything it runs — its channels' tasks,
its turns, the worker threads they use — carries it.

    serving_agent.set("bob")             # AgentService.start does this, in its own task
    handler.addFilter(NameTheAgent())    # "bob: telegram: started"
    tail.addFilter(OnlyAgent("bob"))     # bob's web page shows bob's lines only
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

serving_agent: ContextVar[str | None] = ContextVar("pinch_serving_agent", default=None)


def _agent_of(record: logging.LogRecord) -> str | None:
    if not hasattr(record, "pinch_agent"):  # read once, where the record was made
        record.pinch_agent = serving_agent.get()
    found: str | None = getattr(record, "pinch_agent", None)
    return found


class NameTheAgent(logging.Filter):
    """Begins each line logged while serving an agent with its name (once, whatever the number
    of handlers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        agent = _agent_of(record)
        if agent and not getattr(record, "pinch_named", False):
            record.msg = f"{agent}: {record.msg}"  # agent names hold no '%'
            record.pinch_named = True
        return True


class OnlyAgent(logging.Filter):
    """Lets through the lines of one agent only (the tail its web page shows)."""

    def __init__(self, agent: str) -> None:
        super().__init__()
        self.agent = agent

    def filter(self, record: logging.LogRecord) -> bool:
        return _agent_of(record) == self.agent
