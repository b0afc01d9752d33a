"""Advice names where a value really came from, and advice that mentions a file on the server
is not sent to a chat: the chat gets a line without the path, the log keeps the whole advice."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import pytest

from agent.model.anthropic_client import AnthropicClient
from agent.model.errors import ServerUnreachableError
from agent.types import Message, ModelRequest
from tests.fakes.model_server import FakeModelServer, error_reply
from tests.fakes.telegram_server import FakeTelegram
from tests.gateway_support import make_rig
from tests.telegram_support import make_channel, telegram_config, until


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def unreachable_advice(client: AnthropicClient) -> str:
    request = ModelRequest(messages=(Message.user("hi"),), max_tokens=5)
    with pytest.raises(ServerUnreachableError) as err:
        asyncio.run(client.complete(request))
    return str(err.value)


def test_an_unreachable_url_from_anthropic_base_url_is_named_as_from_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{closed_port()}")
    client = AnthropicClient("claude-test", api_key="k", timeout_s=5, max_retries=0)
    advice = unreachable_advice(client)
    assert "ANTHROPIC_BASE_URL" in advice
    assert "config.toml" not in advice


def test_an_unreachable_api_base_from_the_settings_names_api_base(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    url = f"http://127.0.0.1:{closed_port()}"
    client = AnthropicClient("claude-test", api_key="k", base_url=url, timeout_s=5, max_retries=0)
    assert "check api_base in" in unreachable_advice(client)


def test_model_advice_sent_to_telegram_has_no_server_path(
    tmp_path: Path, pinch_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> list[str]:
        with FakeModelServer() as server, FakeTelegram() as tg:
            server.respond_with(lambda request: error_reply(500, "overloaded"))
            rig = make_rig(tmp_path, server, telegram=telegram_config(tg))
            rig.gateway.channels["telegram"] = make_channel(tg, tmp_path)
            del rig.gateway.channels["slack"]
            await rig.gateway.start()
            tg.push(tg.private_text("hello"))
            await until(lambda: bool(tg.sent), what="the failure notice", timeout=30)
            await rig.gateway.idle()
            await rig.close()
            return [m.text for m in tg.sent]

    with caplog.at_level(logging.WARNING):
        texts = asyncio.run(scenario())
    assert texts and "fallback_models" in texts[0]
    assert all(str(pinch_home) not in t and "~/" not in t for t in texts)
    assert any(str(pinch_home / "config.toml") in r.getMessage() for r in caplog.records)
