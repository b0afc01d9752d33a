"""Connections to the model's server that fail before an answer (issue 19, a burst): the real
anthropic SDK against a listener that takes no connection (a connect timeout), against the
scripted FakeModelServer behind a gate that resets connections (tests/fakes/tcp_gate.py), and
against a closed port. What must hold: a connect timeout says so — the server's host, the
connect timeout, never `timeout_s` nor a key — and is tried again within `timeout_s`; a reset
connection is tried again even with `max_retries = 0`; a refused one (nothing listens) is
reported at once."""

from __future__ import annotations

import asyncio
import importlib
import socket
import time
from collections.abc import Iterator

import pytest

from agent.model.anthropic_client import AnthropicClient
from agent.model.errors import ModelConnectTimeoutError, ServerUnreachableError, server_host
from agent.types import Message, ModelRequest
from tests.fakes.model_server import FakeModelServer, text_reply
from tests.fakes.tcp_gate import TcpGate
from tests.fakes.tcp_gate import full_listener as hanging_port

KEY = "sk-test-connect-key-0123456789abcdef"


def ask(text: str = "hi") -> ModelRequest:
    return ModelRequest(messages=(Message.user(text),), system="You are Pinch.")


@pytest.fixture
def full_listener() -> Iterator[int]:
    with hanging_port() as port:
        yield port


def test_a_connect_timeout_names_the_server_and_the_connect_timeout(full_listener: int) -> None:
    client = AnthropicClient(
        "claude-test", api_key=KEY, base_url=f"http://127.0.0.1:{full_listener}", timeout_s=3.0
    )
    client.connect_timeout_s = 0.4
    importlib.import_module("anthropic")  # loading the SDK is not counted against timeout_s
    started = time.monotonic()
    with pytest.raises(ModelConnectTimeoutError) as caught:
        asyncio.run(client.complete(ask()))
    took = time.monotonic() - started
    message = str(caught.value)
    assert message.startswith(
        f"Could not connect to the model server at 127.0.0.1:{full_listener} within 0.4 s"
    )
    assert "timeout_s" not in message and KEY not in message
    # Tried again (nothing was sent), within the call's budget, not beyond it.
    assert "1 attempt)" not in message and "attempts)" in message
    assert took < 3.0 + 1.0
    assert caught.value.transient  # a fallback model is tried next


def test_the_host_in_a_message_carries_no_secret() -> None:
    assert server_host("https://user:s3cret@models.example:8443/v1?key=abc") == (
        "models.example:8443"
    )
    assert server_host("http://[::1]:11434") == "[::1]:11434"
    assert server_host("https://api.anthropic.com") == "api.anthropic.com"
    assert server_host("the openai API") == "the openai API"


def test_reset_connections_are_tried_again_even_without_retries() -> None:
    with FakeModelServer() as model, TcpGate(model.port, reset_first=2) as gate:
        model.script(text_reply("Here."))
        client = AnthropicClient(
            "claude-test", api_key=KEY, base_url=gate.url, timeout_s=30, max_retries=0
        )
        response = asyncio.run(client.complete(ask()))
    assert response.text == "Here."
    assert gate.resets == 2
    assert len(model.requests) == 1  # answered once


def test_a_refused_connection_is_reported_at_once() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = AnthropicClient(
        "claude-test", api_key=KEY, base_url=f"http://127.0.0.1:{port}", max_retries=0
    )
    started = time.monotonic()
    with pytest.raises(ServerUnreachableError, match="connection refused"):
        asyncio.run(client.complete(ask()))
    assert time.monotonic() - started < 2.0
