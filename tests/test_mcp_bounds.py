"""What a server may cost Pinch: a tool whose parameters' schema is huge is left out (and
logged), `mcp_tool_search` returns at most `max_result_chars` of schemas (naming the tools whose
schemas did not fit), and a server writing a flood of lines that are not JSON-RPC costs a few
log lines, not one a line, and its stderr a file of bounded size."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.mcp.connection import MAX_GARBAGE_LOGGED
from agent.mcp.mcp_config import McpConfig
from agent.mcp.mcp_tools import MAX_SCHEMA_CHARS, SEARCH_TOOL, McpServers
from agent.mcp.stderr_log import MAX_STDERR_BYTES
from agent.policy import policy_for
from agent.tools import ToolContext, ToolRegistry
from agent.types import ToolCall
from tests.agent_support import OWNER
from tests.mcp_support import LoopThread, stdio


@pytest.fixture(scope="module")
def wide() -> Iterator[tuple[LoopThread, McpServers]]:
    loop = LoopThread()
    servers = McpServers(McpConfig.model_validate({"servers": {"wide": stdio("wide")}}))
    loop.run(servers.start(wait_s=60), timeout=90)
    yield loop, servers
    loop.run(servers.aclose())
    loop.close()


def test_a_tool_with_a_huge_parameter_schema_is_left_out_and_logged(
    wide: tuple[LoopThread, McpServers], caplog: pytest.LogCaptureFixture
) -> None:
    _, servers = wide
    with caplog.at_level(logging.WARNING, logger="agent.mcp.mcp_tools"):
        servers._cache = None  # the warning is logged when the tools are read
        names = [t.name for t in servers.visible_tools(OWNER, policy_for(OWNER))]

    assert names == [f"wide__wide_{i}" for i in range(5)]
    assert "the parameters of wide__huge take 208,137 characters" in caplog.text
    assert f"(more than {MAX_SCHEMA_CHARS:,}); the tool is left out" in caplog.text


def test_a_search_returns_as_many_schemas_as_fit_a_result_and_names_the_others(
    wide: tuple[LoopThread, McpServers],
) -> None:
    loop, servers = wide
    registry = ToolRegistry([], [servers])
    call = ToolCall("t1", SEARCH_TOOL, {"query": "record"})

    result = loop.run(registry.call(call, ToolContext(OWNER, "s1")))

    assert not result.is_error and len(result.content) <= servers.config.max_result_chars
    found = json.loads(result.content)
    with_schema = [t["name"] for t in found["tools"] if "parameters" in t]
    assert len(found["tools"]) == 5 and 1 <= len(with_schema) < 5
    assert "search a name" in found["note"]


def test_a_flood_of_lines_that_are_not_json_rpc_is_a_few_log_lines_and_the_server_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flood = stdio("garbage", env={"MCP_TEST_GARBAGE": "2000"})
    loop = LoopThread()
    servers = McpServers(McpConfig.model_validate({"servers": {"garbage": flood}}))
    registry = ToolRegistry([], [servers])
    try:
        with caplog.at_level(logging.WARNING, logger="agent.mcp"):
            loop.run(servers.start(wait_s=30), timeout=60)
            call = ToolCall("t1", "garbage__add", {"a": 1, "b": 2})
            result = loop.run(registry.call(call, ToolContext(OWNER, "s1")))
    finally:
        loop.run(servers.aclose())
        loop.close()

    assert not result.is_error and "3.0" in result.content
    lines = [r.getMessage() for r in caplog.records if "not JSON-RPC" in r.getMessage()]
    assert len(lines) == MAX_GARBAGE_LOGGED and "the last one logged" in lines[-1]


def test_a_chatty_servers_stderr_is_kept_in_a_file_of_bounded_size(tmp_path: Path) -> None:
    chatty = stdio("calc", env={"MCP_TEST_STDERR_MB": "3"})
    loop = LoopThread()
    servers = McpServers(
        McpConfig.model_validate({"servers": {"chatty": chatty}}), stderr_dir=tmp_path
    )
    registry = ToolRegistry([], [servers])
    try:
        loop.run(servers.start(wait_s=30), timeout=60)
        call = ToolCall("t1", "chatty__add", {"a": 1, "b": 2})
        result = loop.run(registry.call(call, ToolContext(OWNER, "s1")))
    finally:
        loop.run(servers.aclose())
        loop.close()

    assert not result.is_error and "3.0" in result.content
    log, before = tmp_path / "chatty.stderr.log", tmp_path / "chatty.stderr.log.1"
    assert 0 < log.stat().st_size <= MAX_STDERR_BYTES
    assert before.stat().st_size <= MAX_STDERR_BYTES  # 3 MB written: the first MB is gone
    assert {log.stat().st_mode & 0o777, before.stat().st_mode & 0o777} == {0o600}
