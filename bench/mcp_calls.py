"""What MCP costs: the overhead of a tool call through Pinch beside calling the server directly,
and the fixed prompt with a 40-tool server.

    .venv/bin/python bench/mcp_calls.py --quick     # < 1 minute
    .venv/bin/python bench/mcp_calls.py [--calls N] [--json]

(Not bench/mcp.py: run as a script, a bench/mcp.py would hide the `mcp` SDK from every other
benchmark in this folder, which is first on their import path.)

## Overhead per tool call

Two instances of the SDK calculator server (tests/fakes/mcp_servers.py, stdio). One is called
directly through `mcp.ClientSession.call_tool`; the other through Pinch's whole path: the
`ToolRegistry` (policy, schema check, taint), `McpServers` (visibility, the supervised
connection's timeout) and the result's conversion and untrusted wrapping. Calls alternate
between the two so load on the machine hits both alike; the overhead is the difference of the
medians (and of the p95s). On a loaded machine that difference is mostly noise, so the time of
Pinch's own code around the connection's call (the whole call minus the SDK request inside it)
is measured too. Target: ≤ 5 ms.

## Fixed tokens with a 40-tool server

The fixed part of the owner's first request (system prompt, workspace files, sections, runtime
block, tool schemas — `Context.fixed_tokens`, Pinch's estimate) over a copy of
workspace_template/: without MCP, with the 40-tool server (listed by name and one line, schemas
on demand), and what its forty schemas would cost if sent in full. Target: ≤ 3,000 tokens plus
a bounded listing (`[mcp] max_listing_tokens`, default 800).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

from agent.context import ContextBuilder  # noqa: E402
from agent.history import build_history  # noqa: E402
from agent.mcp.mcp_config import McpConfig  # noqa: E402
from agent.mcp.mcp_tools import McpServers  # noqa: E402
from agent.policy import policy_for  # noqa: E402
from agent.tools import ToolContext, ToolRegistry  # noqa: E402
from agent.types import ToolCall  # noqa: E402
from memory.store.sessions import SessionKey  # noqa: E402

SERVERS = ROOT / "tests" / "fakes" / "mcp_servers.py"
OWNER = SessionKey.owner_cli()


def _server(kind: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SERVERS), kind]}


def _p95(values: list[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.95) - 1)]


async def call_overhead(calls: int) -> dict[str, float]:
    config = McpConfig.model_validate({"servers": {"calc": _server("calc")}})
    servers = McpServers(config)
    await servers.start(wait_s=60)
    registry = ToolRegistry([], [servers])
    connection = servers.connections["calc"]
    inner: list[float] = []  # the connection's call alone, inside each call through Pinch
    real_call = connection.call

    async def timed_call(tool: str, arguments: Any) -> Any:
        started = time.perf_counter()
        try:
            return await real_call(tool, arguments)
        finally:
            inner.append((time.perf_counter() - started) * 1000)

    connection.call = timed_call  # type: ignore[method-assign]
    params = StdioServerParameters(command=sys.executable, args=[str(SERVERS), "calc"])
    direct: list[float] = []
    pinch: list[float] = []
    own: list[float] = []  # Pinch's code around the connection's call
    try:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            ctx = ToolContext(OWNER, "bench")
            for i in range(calls + 5):
                args = {"a": i, "b": 2}
                started = time.perf_counter()
                await session.call_tool("add", args)
                took_direct = time.perf_counter() - started
                started = time.perf_counter()
                result = await registry.call(ToolCall(f"t{i}", "calc__add", args), ctx)
                took_pinch = time.perf_counter() - started
                assert not result.is_error, result.content
                if i >= 5:  # warm-up left out
                    direct.append(took_direct * 1000)
                    pinch.append(took_pinch * 1000)
                    own.append(took_pinch * 1000 - inner[-1])
    finally:
        await servers.aclose()
    return {
        "calls": calls,
        "direct_p50_ms": statistics.median(direct),
        "pinch_p50_ms": statistics.median(pinch),
        "overhead_p50_ms": statistics.median(pinch) - statistics.median(direct),
        "direct_p95_ms": _p95(direct),
        "pinch_p95_ms": _p95(pinch),
        "overhead_p95_ms": _p95(pinch) - _p95(direct),
        "own_p50_ms": statistics.median(own),
        "own_p95_ms": _p95(own),
    }


async def fixed_tokens() -> dict[str, int]:
    config = McpConfig.model_validate({"servers": {"many": _server("many")}})
    servers = McpServers(config)
    await servers.start(wait_s=60)
    workspace = Path(tempfile.mkdtemp(prefix="pinch-bench-mcp-")) / "workspace"
    shutil.copytree(ROOT / "workspace_template", workspace)
    try:
        policy = policy_for(OWNER)
        without = _fixed(workspace, None)
        with_many = _fixed(workspace, servers)
        full = sum(t.tokens for t in servers.visible_tools(OWNER, policy))
        section = servers.section(OWNER, policy)
        share = dict(section.items) if section is not None else {}
    finally:
        await servers.aclose()
        shutil.rmtree(workspace.parent, ignore_errors=True)
    return {
        "fixed_without_mcp": without,
        "fixed_with_40_tools": with_many,
        "mcp_share": with_many - without,
        "listing_of_many": share.get("many", 0),
        "forty_schemas_in_full": full,
    }


def _fixed(workspace: Path, servers: McpServers | None) -> int:
    builder = ContextBuilder(workspace, sources=(servers,) if servers is not None else ())
    registry = ToolRegistry([], [servers] if servers is not None else [])
    context = builder.build(
        OWNER,
        build_history([], None, 0),
        _builtin_specs(workspace),
        today=date.today(),
        timezone="UTC",
        provided=registry.provided_specs(OWNER, policy_for(OWNER)),
    )
    return int(context.fixed_tokens)


def _builtin_specs(workspace: Path) -> tuple[Any, ...]:
    """The built-in tools' schemas, as a real agent sends them (a throwaway agent database)."""
    from agent.agent_config import AgentConfig
    from agent.model.factory import AnthropicClient
    from app.wiring import build_agent
    from memory.index.index import MemoryIndex
    from memory.memory_config import EmbeddingConfig, MemoryConfig
    from memory.store.sessions import SqliteSessionStore

    index = MemoryIndex.open(
        workspace,
        workspace.parent / "agent.sqlite",
        MemoryConfig(embedding=EmbeddingConfig(provider="none")),
    )
    try:
        agent = build_agent(
            model=AnthropicClient("claude-bench", api_key="x", base_url="http://127.0.0.1:9"),
            store=SqliteSessionStore(index.db),
            index=index,
            workspace=workspace,
            config=AgentConfig(model="claude-bench"),
        )
        return agent.tools.specs
    finally:
        index.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 calls (under a minute)")
    parser.add_argument("--calls", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    calls = args.calls or (300 if args.quick else 3_000)
    overhead = asyncio.run(call_overhead(calls))
    tokens = asyncio.run(fixed_tokens())
    if args.json:
        print(json.dumps({"overhead": overhead, "tokens": tokens}, indent=2))
        return
    print(f"Tool call ({overhead['calls']} calls, calculator over stdio):")
    print(
        f"  direct p50 {overhead['direct_p50_ms']:.2f} ms, through Pinch "
        f"{overhead['pinch_p50_ms']:.2f} ms: overhead {overhead['overhead_p50_ms']:.2f} ms"
    )
    print(
        f"  direct p95 {overhead['direct_p95_ms']:.2f} ms, through Pinch "
        f"{overhead['pinch_p95_ms']:.2f} ms: overhead {overhead['overhead_p95_ms']:.2f} ms"
    )
    print(
        f"  Pinch's own code around the server call: p50 {overhead['own_p50_ms']:.3f} ms, "
        f"p95 {overhead['own_p95_ms']:.3f} ms"
    )
    print("Fixed prompt (owner's first request, Pinch's estimate):")
    print(f"  without MCP                 {tokens['fixed_without_mcp']:>6,} tokens")
    print(f"  with a 40-tool server       {tokens['fixed_with_40_tools']:>6,} tokens")
    print(f"  MCP's share                 {tokens['mcp_share']:>6,} tokens")
    print(f"  forty schemas if sent whole {tokens['forty_schemas_in_full']:>6,} tokens")


if __name__ == "__main__":
    main()
