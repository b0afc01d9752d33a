"""MCP tools in real turns: the fake model server (the real anthropic SDK) calls the tools of
SDK servers; what they return is stored in the transcript like any tool's and treated as
outside content; a 40-tool server is reached through mcp_tool_search and mcp_call; a lazy
server starts on first use; env values come from the environment, never from the file."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.agent_config import AgentConfig
from agent.mcp.mcp_config import McpConfig
from agent.mcp.mcp_tools import CALL_TOOL, SEARCH_TOOL, McpServers
from agent.policy import policy_for
from agent.runtime import Agent
from agent.tools import ToolContext, ToolRegistry
from agent.types import ToolCall
from app.config import ConfigError, load_settings
from app.wiring import build_agent
from memory.index.index import MemoryIndex
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.store.sessions import SqliteSessionStore
from tests.agent_support import (
    OWNER,
    fixed_clock,
    model_client,
    template_workspace,
    tool_results,
)
from tests.fakes.model_server import (
    FakeModelServer,
    Reply,
    ScriptedToolCall,
    text_reply,
    tool_reply,
)
from tests.mcp_support import LoopThread, free_port, http_server, stdio


@pytest.fixture(scope="module")
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.fixture(scope="module")
def running(loop: LoopThread) -> Iterator[McpServers]:
    with http_server("calc") as url:
        config = McpConfig.model_validate(
            {"servers": {"calc": stdio("calc"), "many": stdio("many"), "web": {"url": url}}}
        )
        servers = McpServers(config)
        loop.run(servers.start(wait_s=60), timeout=90)
        yield servers
        loop.run(servers.aclose())


def agent_with(
    tmp_path: Path, server: FakeModelServer, mcp: McpServers
) -> tuple[Agent, MemoryIndex]:
    workspace = template_workspace(tmp_path)
    index = MemoryIndex.open(
        workspace,
        tmp_path / "agent.sqlite",
        MemoryConfig(embedding=EmbeddingConfig(provider="none")),
    )
    agent = build_agent(
        model=model_client(server),
        store=SqliteSessionStore(index.db),
        index=index,
        workspace=workspace,
        config=AgentConfig(model="claude-test"),
        clock=fixed_clock(),
        mcp=mcp,
    )
    return agent, index


def only(running: McpServers, *names: str) -> McpServers:
    return McpServers(running.config, connections={n: running.connections[n] for n in names})


def test_the_model_calls_a_server_tool_and_the_call_is_stored_like_any_tools(
    loop: LoopThread, running: McpServers, tmp_path: Path
) -> None:
    with FakeModelServer() as model:
        model.script(
            tool_reply("calc__add", {"a": 2, "b": 40}),
            Reply(tool_calls=(ScriptedToolCall("memory_append", {"text": "The sum is 42."}),)),
            text_reply("42."),
        )
        agent, index = agent_with(tmp_path, model, only(running, "calc"))
        try:
            reply = loop.run(agent.handle(OWNER, "What is 2 + 40?"))
            events = agent.store.events(reply.session_id)
            shares = loop.run(agent.handle(OWNER, "/context detail")).text
        finally:
            index.close()
    assert reply.text == "42."
    tools = {t["name"]: t for t in model.requests[0].body["tools"]}
    assert tools["calc__add"]["input_schema"]["required"] == ["a", "b"]
    result = tool_results(model.requests[1])[0]
    assert '<untrusted source="mcp:calc__add">\n42.0\n</untrusted>' in result["content"]
    calls = [e.content for e in events if e.kind == "tool_call"]
    assert calls[0]["name"] == "calc__add" and calls[0]["input"] == {"a": 2, "b": 40}
    stored = [e.content for e in events if e.kind == "tool_result"]
    assert "42.0" in json.dumps(stored[0])
    assert "mcp servers" in shares and re.search(r"\n\s+calc\s+\d+", shares)
    daily = next((tmp_path / "workspace" / "memory").glob("*.md")).read_text()
    assert "The sum is 42." in daily and "untrusted" in daily  # the turn read outside content


def test_the_model_calls_a_server_over_streamable_http(
    loop: LoopThread, running: McpServers, tmp_path: Path
) -> None:
    with FakeModelServer() as model:
        model.script(tool_reply("web__multiply", {"a": 6, "b": 7}), text_reply("42."))
        agent, index = agent_with(tmp_path, model, only(running, "web"))
        try:
            reply = loop.run(agent.handle(OWNER, "6 times 7?"))
        finally:
            index.close()
    assert reply.text == "42."
    assert "web__multiply" in [t["name"] for t in model.requests[0].body["tools"]]
    assert (
        '<untrusted source="mcp:web__multiply">\n42.0\n</untrusted>'
        in (tool_results(model.requests[1])[0]["content"])
    )


def test_a_forty_tool_server_is_searched_then_called(
    loop: LoopThread, running: McpServers, tmp_path: Path
) -> None:
    with FakeModelServer() as model:
        model.script(
            tool_reply(SEARCH_TOOL, {"query": "records of kind 12"}),
            tool_reply(CALL_TOOL, {"tool": "many__tool_12", "arguments": {"query": "tea"}}),
            text_reply("Found it."),
        )
        agent, index = agent_with(tmp_path, model, running)
        try:
            reply = loop.run(agent.handle(OWNER, "Look up tea in catalogue 12."))
        finally:
            index.close()
    assert reply.text == "Found it."
    first = model.requests[0]
    names = [t["name"] for t in first.body["tools"]]
    assert SEARCH_TOOL in names and CALL_TOOL in names
    assert not any(n.startswith("many__") for n in names)
    assert "many__tool_12" in first.system_text()  # listed by name and one line
    found = tool_results(model.requests[1])[0]["content"]
    assert '"name": "many__tool_12"' in found
    assert "result 12 for tea" in tool_results(model.requests[2])[1]["content"]


def test_a_lazy_server_starts_on_first_use_and_failures_to_start_are_reported(
    loop: LoopThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_TEST_VALUE", "from-the-environment")
    config = McpConfig.model_validate(
        {
            "servers": {
                "lazy": stdio("calc", lazy=True, env={"API_TOKEN": "${MCP_TEST_VALUE}"}),
                "unset": stdio("calc", env={"API_TOKEN": "${MCP_TEST_NOT_SET}"}),
                "gone": {"url": f"http://127.0.0.1:{free_port()}/mcp", "timeout_s": 5},
            }
        }
    )
    servers = McpServers(config)
    try:
        loop.run(servers.start(wait_s=5))
        states = {s.name: s for s in servers.statuses()}
        assert states["lazy"].state == "idle" and states["lazy"].pid is None
        assert states["unset"].state == "failed"
        assert states["unset"].last_error == "the environment variable MCP_TEST_NOT_SET is not set"
        assert states["gone"].state == "failed" and "ConnectError" in str(states["gone"].last_error)
        section = servers.section(OWNER, policy_for(OWNER))
        assert section is not None and "starts on first use" in section.text
        registry = ToolRegistry([], [servers])
        ctx = ToolContext(OWNER, "s1")
        args: dict[str, Any] = {"tool": "lazy__getenv", "arguments": {"name": "API_TOKEN"}}
        result = loop.run(registry.call(ToolCall("t", CALL_TOOL, args), ctx))
        assert not result.is_error, result.content
        assert "\nfrom-the-environment\n" in result.content
    finally:
        loop.run(servers.aclose())


def test_a_literal_secret_in_env_or_headers_is_refused_with_advice(pinch_home: Path) -> None:
    pinch_home.mkdir(parents=True, exist_ok=True)
    config = pinch_home / "config.toml"
    config.write_text('[mcp.servers.gh]\nurl = "https://example.com/mcp"\n'
                      'headers = { Authorization = "Bearer ghp_literal" }\n')  # fmt: skip
    with pytest.raises(ConfigError, match=r"headers.Authorization to a literal value"):
        load_settings()
    config.write_text('[mcp.servers.gh]\ncommand = "gh-mcp"\nenv = { GITHUB_TOKEN = "ghp_x" }\n')
    with pytest.raises(ConfigError, match=r"env.GITHUB_TOKEN"):
        load_settings()
    config.write_text(
        '[mcp.servers.gh]\ncommand = "gh-mcp"\n'
        'env = { GITHUB_TOKEN = "${GITHUB_TOKEN}", KEYBOARD_LAYOUT = "de" }\n'
    )
    env = load_settings().mcp.servers["gh"].env
    assert env == {"GITHUB_TOKEN": "${GITHUB_TOKEN}", "KEYBOARD_LAYOUT": "de"}


def test_a_server_needs_exactly_one_transport_and_a_usable_name(pinch_home: Path) -> None:
    pinch_home.mkdir(parents=True, exist_ok=True)
    config = pinch_home / "config.toml"
    config.write_text('[mcp.servers.x]\ncommand = "a"\nurl = "http://127.0.0.1/mcp"\n')
    with pytest.raises(ConfigError, match="either command"):
        load_settings()
    config.write_text('[mcp.servers.my__server]\ncommand = "a"\n')
    with pytest.raises(ConfigError, match="server name"):
        load_settings()


def test_the_readmes_example_configuration_is_valid(pinch_home: Path) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## MCP servers") :]
    example = section[section.index("```toml\n") + 8 : section.index("```\n", 10)]
    pinch_home.mkdir(parents=True, exist_ok=True)
    (pinch_home / "config.toml").write_text(example, encoding="utf-8")
    servers = load_settings().mcp.servers
    assert sorted(servers) == ["fetch", "files", "github"]
    assert servers["files"].transport == "stdio" and servers["github"].transport == "http"
    assert servers["fetch"].lazy and servers["github"].allow_tools == ["search_issues", "get_issue"]


def test_a_stdio_server_gets_none_of_pinchs_secrets(
    loop: LoopThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-should-not-leak")
    monkeypatch.setenv("PINCH_TELEGRAM__BOT_TOKEN", "123:should-not-leak")
    servers = McpServers(McpConfig.model_validate({"servers": {"calc": stdio("calc")}}))
    registry = ToolRegistry([], [servers])
    try:
        loop.run(servers.start(wait_s=30), timeout=60)
        for name in ("ANTHROPIC_API_KEY", "PINCH_TELEGRAM__BOT_TOKEN", "PATH"):
            call = ToolCall("t", "calc__getenv", {"name": name})
            result = loop.run(registry.call(call, ToolContext(OWNER, "s1")))
            assert ("\n(unset)\n" in result.content) == (name != "PATH"), name
    finally:
        loop.run(servers.aclose())
