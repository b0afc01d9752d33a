"""How the model's tool calls run: a `Tool` is a JSON schema and an async function; a
`ToolRegistry` runs calls against the turn's `ToolContext`. The built-in memory tools are in
agent/memory_tools.py, the `intent` tool in agent/intent_tool.py, `schedule` in app/automations.

A tool that fails returns its failure to the model as a tool result with `is_error` set, worded
so the model can correct itself; nothing a tool does can crash a turn. Blocking work (searching,
embedding, SQLite and file writes) runs in a worker thread, off the event loop.

Privacy: a call runs only when the turn's `SessionPolicy` (agent/policy.py), carried in the
`ToolContext`, offers and allows that tool; each tool asks the policy again for what it touches.

A `ToolProvider` offers tools that change while the process runs (the MCP servers' tools, in
agent/mcp): it decides itself which of them a session is offered, and its tools are looked up
after the fixed ones.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.policy import SessionPolicy, policy_for, taints
from agent.types import ToolCall, ToolResult, ToolSpec
from memory.errors import MemoryError_
from memory.store.sessions import SessionKey

log = logging.getLogger(__name__)

MAX_RESULT_CHARS = 16_000
# The memory flush may read and append to today's log, nothing else.
FLUSH_TOOLS = frozenset(
    {"memory_search", "memory_get", "transcript_read", "read_file", "current_time", "memory_append"}
)


class ToolFailure(Exception):
    """A failure the model should read and act on (a bad path, a refused write, …)."""


@dataclass
class TurnTaint:
    """Whether this turn has read outside content (shared by its tool calls, mutable)."""

    sources: list[str] = field(default_factory=list)  # the tools that tainted it

    @property
    def tainted(self) -> bool:
        return bool(self.sources)

    def mark(self, source: str) -> None:
        self.sources.append(source)


@dataclass(frozen=True)
class ToolContext:
    """Who is asking: the conversation a tool call belongs to, and what its turn may do."""

    key: SessionKey
    session_id: str
    policy: SessionPolicy = field(default=None)  # type: ignore[assignment]  # set below
    attachments: frozenset[str] = frozenset()  # files sent in this conversation (workspace paths)
    taint: TurnTaint = field(default_factory=TurnTaint)  # the turn's, shared by its calls
    project: str | None = None  # the session's active project (agent/projects.py), if any

    def __post_init__(self) -> None:
        if self.policy is None:  # the owner's word in `key`'s conversation
            object.__setattr__(self, "policy", policy_for(self.key))


@dataclass(frozen=True)
class ToolOutput:
    """What a tool returns when it attaches an image to its text (read_file on a picture):
    `image` is the stored reference (workspace path, media type, width, height)."""

    text: str
    image: Mapping[str, Any] | None = None


ToolFunction = Callable[[ToolContext, Mapping[str, Any]], Awaitable[str | ToolOutput]]


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    run: ToolFunction


class ToolProvider(Protocol):
    """Tools that come and go while the process runs (MCP servers' tools)."""

    def offered(self, key: SessionKey, policy: SessionPolicy) -> Sequence[Tool]:
        """The tools listed to the model in `key`'s conversation under `policy`."""
        ...

    def find(self, name: str, key: SessionKey, policy: SessionPolicy) -> Tool | None:
        """Tool `name` if this conversation may call it (listed or not), else None."""
        ...


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool], providers: Iterable[ToolProvider] = ()) -> None:
        self._tools = {t.spec.name: t for t in tools}
        self._providers = list(providers)

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        """The fixed tools (a provider's tools depend on the session: `offered_specs`)."""
        return tuple(t.spec for t in self._tools.values())

    def provided_specs(self, key: SessionKey, policy: SessionPolicy) -> tuple[ToolSpec, ...]:
        """The providers' tools listed to the model in `key`'s conversation under `policy`."""
        provided = [t.spec for p in self._providers for t in p.offered(key, policy)]
        return tuple(s for s in provided if s.name not in self._tools)

    def offered_specs(self, key: SessionKey, policy: SessionPolicy) -> tuple[ToolSpec, ...]:
        """Every tool listed to the model in `key`'s conversation: the fixed tools `policy`
        offers, then the providers' tools."""
        fixed = [t.spec for t in self._tools.values() if policy.offers(t.spec.name)]
        return (*fixed, *self.provided_specs(key, policy))

    def add_provider(self, provider: ToolProvider) -> None:
        self._providers.append(provider)

    def add(self, tool: Tool) -> None:
        """Offer one more tool (e.g. `schedule`, added where its store is built); the policy
        still decides per turn who is offered and allowed it."""
        self._tools[tool.spec.name] = tool

    async def call(
        self, call: ToolCall, ctx: ToolContext, *, allowed: frozenset[str] | None = None
    ) -> ToolResult:
        """Run `call`; any failure becomes an error result. Only tools in `ctx.policy` run,
        and of those only the ones in `allowed` when given (the memory flush)."""
        tool = self._tools.get(call.name)
        try:
            offered = _Names(lambda: [s.name for s in self.offered_specs(ctx.key, ctx.policy)])
            if tool is None:
                tool = self._provided(call.name, ctx)
                if tool is None:
                    raise ToolFailure(f"Unknown tool {call.name!r}. Available: {offered}.")
            elif not ctx.policy.offers(call.name):
                raise ToolFailure(
                    f"{call.name} is not available in this conversation: only the owner's direct "
                    f"chat may use it. Available: {offered}."
                )
            elif not ctx.policy.allows(call.name):
                raise ToolFailure(
                    f"{call.name} runs only on the owner's own message, not in an automated turn "
                    "(it changes the owner's curated memory or acts for the owner). Note it with "
                    "memory_append instead."
                )
            if allowed is not None and call.name not in allowed:
                raise ToolFailure(
                    f"{call.name} is not allowed now. Allowed: {', '.join(sorted(allowed))}."
                )
            check_input(call.input, tool.spec.input_schema)
            if taints(call.name):  # outside content: the rest of the turn is tainted
                ctx.taint.mark(call.name)
            output = await tool.run(ctx, call.input)
        except (ToolFailure, MemoryError_, ValueError, OSError) as exc:
            return ToolResult(call.id, str(exc) or type(exc).__name__, is_error=True)
        except Exception as exc:  # a bug in a tool must not end the owner's turn
            log.exception("tool %s failed", call.name)
            return ToolResult(call.id, f"{call.name} failed: {type(exc).__name__}: {exc}", True)
        image = output.image if isinstance(output, ToolOutput) else None
        text = output.text if isinstance(output, ToolOutput) else output
        if len(text) > MAX_RESULT_CHARS:
            text = text[:MAX_RESULT_CHARS] + "\n… [cut; ask for fewer lines or results]"
        return ToolResult(call.id, text, image=image)

    def _provided(self, name: str, ctx: ToolContext) -> Tool | None:
        for provider in self._providers:
            if (tool := provider.find(name, ctx.key, ctx.policy)) is not None:
                return tool
        return None


class _Names:
    """The offered tools' names, listed only when an error message shows them."""

    def __init__(self, names: Callable[[], list[str]]) -> None:
        self._names = names

    def __str__(self) -> str:
        return ", ".join(self._names())


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def check_input(value: Mapping[str, Any], schema: Mapping[str, Any]) -> None:
    """Raise ToolFailure when `value` misses a required property or has one of the wrong type."""
    if "_unparsed_arguments" in value:
        raise ToolFailure(f"The arguments are not a JSON object: {value['_unparsed_arguments']!r}")
    properties = schema.get("properties", {})
    missing = [name for name in schema.get("required", []) if name not in value]
    if missing:
        raise ToolFailure(f"Missing required argument(s): {', '.join(missing)}.")
    for name, given in value.items():
        spec = properties.get(name)
        if spec is None:
            continue
        types = _JSON_TYPES.get(spec.get("type", ""), (object,))
        if not isinstance(given, types) or (isinstance(given, bool) and bool not in types):
            raise ToolFailure(f"Argument {name!r} must be of type {spec.get('type')}.")
        if "enum" in spec and given not in spec["enum"]:
            raise ToolFailure(f"Argument {name!r} must be one of {spec['enum']}.")
        if "minimum" in spec and given < spec["minimum"]:
            raise ToolFailure(f"Argument {name!r} must be at least {spec['minimum']}.")
