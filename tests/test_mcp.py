"""The MCP client against small servers written with the SDK (tests/fakes/mcp_servers.py), over
stdio and streamable HTTP: tools as SERVER__tool, untrusted results, failures that never block a
turn (crash, hang, 5 MB, a server that cannot start), who may reach which server, and the token
cost of a 40-tool server. The servers of this module start once and serve every test."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.context import ContextBuilder, render_context
from agent.history import build_history
from agent.mcp.mcp_config import McpConfig
from agent.mcp.mcp_tools import CALL_TOOL, SEARCH_TOOL, McpServers
from agent.policy import policy_for
from agent.tools import ToolContext, ToolRegistry
from agent.types import ToolCall, ToolResult
from memory.store.sessions import SessionKey
from tests.agent_support import GROUP, NOW, OWNER, template_workspace
from tests.mcp_support import LoopThread, alive, http_server, stdio, wait_until

PERSON = SessionKey("main", "telegram", "direct", "501")  # a paired person's direct chat
LISTED_GROUP = SessionKey("main", "telegram", "group", "-100777")
HANG_TIMEOUT_S = 1.5


@pytest.fixture(scope="module")
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.fixture(scope="module")
def mcp(loop: LoopThread) -> Iterator[McpServers]:
    with http_server("calc") as url:
        config = McpConfig.model_validate(
            {
                "servers": {
                    "calc": stdio("calc"),
                    "web": {"url": url},
                    "crash": stdio("crash"),
                    "hang": stdio("hang", timeout_s=HANG_TIMEOUT_S),
                    "big": stdio("big"),
                    "many": stdio("many"),
                    "family": stdio(
                        "calc",
                        shared=True,
                        groups=["telegram:-100777"],
                        allow_tools=["add", "multiply", "pid"],
                        deny_tools=["multiply"],
                    ),
                    "dies": stdio("dies"),
                    "liar": stdio("liar"),
                    "off": stdio("calc", enabled=False),
                }
            }
        )
        servers = McpServers(config)
        loop.run(servers.start(wait_s=60), timeout=90)
        yield servers
        loop.run(servers.aclose())


def call(
    loop: LoopThread, mcp: McpServers, name: str, key: SessionKey = OWNER, **args: Any
) -> ToolResult:
    registry = ToolRegistry([], [mcp])
    return loop.run(registry.call(ToolCall("toolu_1", name, args), ToolContext(key, "s1")))


def state(mcp: McpServers, name: str) -> Any:
    return next(s for s in mcp.statuses() if s.name == name)


def test_the_calculator_answers_over_stdio_and_over_http(loop: LoopThread, mcp: McpServers) -> None:
    for server in ("calc", "web"):
        result = call(loop, mcp, f"{server}__add", a=2, b=3)
        assert not result.is_error, result.content
        assert "\n5.0\n" in result.content
    assert state(mcp, "web").transport == "http"


def test_a_result_is_outside_content_wrapped_as_untrusted_and_taints_the_turn(
    loop: LoopThread, mcp: McpServers
) -> None:
    registry = ToolRegistry([], [mcp])
    ctx = ToolContext(OWNER, "s1")
    result = loop.run(registry.call(ToolCall("t", "calc__multiply", {"a": 6, "b": 7}), ctx))
    assert result.content.startswith("The text below came from an MCP server")
    assert '<untrusted source="mcp:calc__multiply">\n42.0\n</untrusted>' in result.content
    assert ctx.taint.sources == ["calc__multiply"]


def test_an_error_the_tool_reports_reaches_the_model_as_an_error(
    loop: LoopThread, mcp: McpServers
) -> None:
    result = call(loop, mcp, "calc__divide", a=1, b=0)
    assert result.is_error
    assert result.content.startswith("calc__divide reported an error")
    assert not call(loop, mcp, "calc__add", a=1, b=1).is_error  # the server is fine


def test_arguments_are_checked_against_the_tools_schema(loop: LoopThread, mcp: McpServers) -> None:
    result = call(loop, mcp, "calc__add", a=1)
    assert result.is_error and "Missing required argument(s): b" in result.content


def test_a_crash_is_one_log_line_one_line_to_the_model_and_a_restart(
    loop: LoopThread, mcp: McpServers, caplog: pytest.LogCaptureFixture
) -> None:
    before, restarts = state(mcp, "crash").pid, state(mcp, "crash").restarts
    assert before is not None and alive(before)
    with caplog.at_level(logging.WARNING, logger="agent.mcp"):
        result = call(loop, mcp, "crash__boom")
        assert result.is_error
        assert result.content.startswith("tool unavailable: MCP server crash")
        assert "\n" not in result.content
        wait_until(lambda: state(mcp, "crash").restarts > restarts, what="the restart")
        wait_until(lambda: state(mcp, "crash").state == "ready", what="the new process")
    lines = [r for r in caplog.records if "crash" in r.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is None
    assert "(retrying in " in lines[0].getMessage()
    after = call(loop, mcp, "crash__pid")
    assert not after.is_error and str(before) not in after.content


def test_a_server_that_dies_while_idle_is_noticed_and_restarted(
    loop: LoopThread, mcp: McpServers, caplog: pytest.LogCaptureFixture
) -> None:
    wait_until(lambda: state(mcp, "crash").state == "ready", what="the crash server")
    before, restarts = state(mcp, "crash").pid, state(mcp, "crash").restarts
    assert before is not None
    with caplog.at_level(logging.WARNING, logger="agent.mcp"):
        os.kill(before, signal.SIGKILL)
        wait_until(lambda: state(mcp, "crash").restarts > restarts, what="the restart")
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("agent.") and r.getMessage().startswith("MCP server crash ")
    ]
    assert len(lines) == 1  # the backoff grows: the server was restarted a moment ago
    assert lines[0].startswith("MCP server crash unavailable: the server's process exited")
    wait_until(lambda: state(mcp, "crash").state == "ready", what="the new process")
    assert not call(loop, mcp, "crash__pid").is_error


def test_a_hanging_call_is_cut_at_timeout_s_and_the_server_restarted(
    loop: LoopThread, mcp: McpServers
) -> None:
    hung, restarts = state(mcp, "hang").pid, state(mcp, "hang").restarts
    started = time.monotonic()
    result = call(loop, mcp, "hang__wait")
    took = time.monotonic() - started
    assert result.is_error and f"no answer within {HANG_TIMEOUT_S:g} s" in result.content
    assert took < HANG_TIMEOUT_S + 1.5
    assert hung is not None
    wait_until(lambda: state(mcp, "hang").restarts > restarts, what="the restart")
    wait_until(lambda: state(mcp, "hang").state == "ready", what="the new process")
    assert not alive(hung)  # the hung process was ended, not left behind
    assert not call(loop, mcp, "hang__pid").is_error


def test_a_5_mb_result_is_cut_to_the_cap_and_says_what_was_cut(
    loop: LoopThread, mcp: McpServers
) -> None:
    result = call(loop, mcp, "big__dump")
    assert not result.is_error
    assert len(result.content) < 16_000
    assert "[cut: the result was 5,242," in result.content
    assert "the first 15,000 are shown" in result.content


def test_a_server_that_cannot_start_is_reported_retried_and_blocks_nothing(
    loop: LoopThread, mcp: McpServers
) -> None:
    dies = state(mcp, "dies")
    assert dies.state in ("failed", "starting")
    assert dies.last_error  # how it shows depends on when it died: a closed pipe, exited, …
    wait_until(lambda: state(mcp, "dies").restarts >= 1, what="a retry")
    started = time.monotonic()
    assert not call(loop, mcp, "calc__add", a=1, b=2).is_error
    assert time.monotonic() - started < 2
    assert state(mcp, "off").state == "disabled"


def test_a_line_of_garbage_on_stdout_is_one_log_line_and_the_server_keeps_working(
    loop: LoopThread, caplog: pytest.LogCaptureFixture
) -> None:
    servers = McpServers(McpConfig.model_validate({"servers": {"garbage": stdio("garbage")}}))
    with caplog.at_level(logging.WARNING, logger="agent.mcp"):
        loop.run(servers.start(wait_s=30), timeout=60)
        try:
            result = call(loop, servers, "garbage__add", a=1, b=2)
        finally:
            loop.run(servers.aclose())
    assert not result.is_error and "3.0" in result.content
    # Pinch's own line; the SDK's (with a traceback) is silenced by the gateway's logging setup
    lines = [r.getMessage() for r in caplog.records if not r.name.startswith("mcp")]
    assert lines == [
        "MCP server garbage wrote a line that is not JSON-RPC (ignored): 'this is not json-rpc'"
    ]


def test_a_result_that_is_not_mcp_is_one_line_to_the_model_and_a_restart(
    loop: LoopThread, mcp: McpServers
) -> None:
    restarts = state(mcp, "liar").restarts
    result = call(loop, mcp, "liar__answer")
    assert result.is_error and "\n" not in result.content
    assert result.content == (
        "tool unavailable: MCP server liar: it answered something that is not MCP (content: "
        "Input should be a valid list); it is being restarted"
    )
    wait_until(lambda: state(mcp, "liar").restarts > restarts, what="the restart")
    wait_until(lambda: state(mcp, "liar").state == "ready", what="the new process")


def test_allow_tools_and_deny_tools_choose_what_is_offered(
    loop: LoopThread, mcp: McpServers
) -> None:
    assert state(mcp, "family").tools == ("add", "pid")
    assert call(loop, mcp, "family__multiply", a=1, b=2).is_error


def test_an_owner_only_server_is_out_of_reach_of_everyone_else(
    loop: LoopThread, mcp: McpServers
) -> None:
    registry = ToolRegistry([], [mcp])
    for key in (PERSON, GROUP, LISTED_GROUP):
        names = " ".join(s.name for s in registry.offered_specs(key, policy_for(key)))
        assert "calc__" not in names
        result = call(loop, mcp, "calc__add", key, a=1, b=2)
        assert result.is_error and "Unknown tool 'calc__add'" in result.content
        via_call = call(loop, mcp, CALL_TOOL, key, tool="calc__add", arguments={"a": 1, "b": 2})
        assert via_call.is_error


def test_a_shared_server_reaches_paired_people_and_only_the_groups_it_lists(
    loop: LoopThread, mcp: McpServers
) -> None:
    for key in (PERSON, LISTED_GROUP):
        assert not call(loop, mcp, "family__add", key, a=1, b=2).is_error
    assert call(loop, mcp, "family__add", GROUP, a=1, b=2).is_error  # not listed


def test_forty_tools_are_listed_by_name_within_a_bounded_number_of_tokens(
    loop: LoopThread, mcp: McpServers, tmp_path: Path
) -> None:
    workspace = template_workspace(tmp_path)
    only_many = McpServers(mcp.config, connections={"many": mcp.connections["many"]})
    registry = ToolRegistry([], [only_many])
    full = sum(t.tokens for t in only_many.visible_tools(OWNER, policy_for(OWNER)))
    without = _fixed_tokens(workspace, None)
    with_many = _fixed_tokens(workspace, only_many)
    assert full > 2_000  # forty schemas in full would cost this much
    assert with_many - without <= mcp.config.max_listing_tokens + 250
    specs = registry.offered_specs(OWNER, policy_for(OWNER))
    assert [s.name for s in specs] == [SEARCH_TOOL, CALL_TOOL]  # no schema of the forty
    section = only_many.section(OWNER, policy_for(OWNER))
    assert section is not None and "many__tool_07" in section.text

    found = call(loop, only_many, SEARCH_TOOL, query="kind 7 catalogue")
    assert '"name": "many__tool_07"' in found.content and '"query"' in found.content
    answer = call(loop, only_many, CALL_TOOL, tool="many__tool_07", arguments={"query": "x"})
    assert not answer.is_error and "result 7 for x" in answer.content


def test_context_shows_each_servers_share(mcp: McpServers, tmp_path: Path) -> None:
    workspace = template_workspace(tmp_path)
    context = _context(workspace, mcp)
    text = render_context(context, detail=True, window=200_000, threshold=170_000)
    part = next(p for p in context.parts if p.name == "mcp servers")
    shares = dict(part.items)
    assert shares["many"] > 0 and shares["calc"] > 0 and "web" in shares
    assert "mcp servers" in text and "many" in text
    assert context.fixed_tokens >= part.tokens


def _context(workspace: Path, mcp: McpServers | None) -> Any:
    builder = ContextBuilder(workspace, sources=(mcp,) if mcp is not None else ())
    registry = ToolRegistry([], [mcp] if mcp is not None else [])
    return builder.build(
        OWNER,
        build_history([], None, 0),
        (),
        today=NOW.date(),
        timezone="UTC",
        provided=registry.provided_specs(OWNER, policy_for(OWNER)),
    )


def _fixed_tokens(workspace: Path, mcp: McpServers | None) -> int:
    return int(_context(workspace, mcp).fixed_tokens)


def test_the_error_codes_pinch_knows_are_the_sdks() -> None:
    import mcp_types

    from agent.mcp.connection import CONNECTION_CLOSED, REQUEST_TIMEOUT

    assert (CONNECTION_CLOSED, REQUEST_TIMEOUT) == (
        mcp_types.CONNECTION_CLOSED,
        mcp_types.REQUEST_TIMEOUT,
    )
