"""The model clients, driving the real anthropic SDK and litellm against a scripted local server."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from agent.agent_config import AgentConfig
from agent.model.errors import (
    AuthenticationFailedError,
    ContextTooLongError,
    MissingKeyError,
    ModelTimeoutError,
    RateLimitedError,
    RequestRefusedError,
    ServerError,
    ServerUnreachableError,
    UnknownModelError,
    UnknownProviderError,
)
from agent.model.factory import (
    DEFAULT_MODEL,
    AnthropicClient,
    FallbackClient,
    LiteLLMClient,
    anthropic_params,
    create_model_client,
)
from agent.types import Message, ModelRequest, ModelResponse, ToolResult, ToolSpec
from common.home import config_file_hint
from tests.fakes.model_server import (
    FakeModelServer,
    RecordedRequest,
    Reply,
    error_reply,
    text_reply,
    tool_reply,
)

# litellm 1.108 reads pydantic attributes that pydantic 2.11 deprecates, on every chunk, and its
# Ollama types trip a pydantic warning when first loaded.
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning:litellm.*"),
    pytest.mark.filterwarnings("ignore:.*ReadOnly. qualifier:UserWarning"),
]

KEY = "sk-test-secret-key-0123456789"
SYSTEM = ("You are Pinch, a personal assistant.", "# USER.md\nThe owner likes short answers.")
WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(api_key=KEY) as fake:
        yield fake


@pytest.fixture(autouse=True)
def no_provider_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)


def claude(server: FakeModelServer, model: str = DEFAULT_MODEL, **options: Any) -> AnthropicClient:
    options.setdefault("api_key", KEY)
    return AnthropicClient(model, base_url=server.url, **options)


def openai_compatible(server: FakeModelServer, **options: Any) -> LiteLLMClient:
    options.setdefault("api_key", KEY)
    return LiteLLMClient("openai/local-model", api_base=server.openai_url, **options)


def ask(text: str, **options: Any) -> ModelRequest:
    return ModelRequest(messages=(Message.user(text),), system=SYSTEM, **options)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cache_markers(body: Any) -> list[str]:
    """Where the request put cache_control markers, as readable paths."""
    found = []
    for i, tool in enumerate(body.get("tools", [])):
        if "cache_control" in tool:
            found.append(f"tools[{i}]")
    for i, block in enumerate(body.get("system", [])):
        if "cache_control" in block:
            found.append(f"system[{i}]")
    for i, message in enumerate(body["messages"]):
        for j, block in enumerate(message["content"]):
            if "cache_control" in block:
                found.append(f"messages[{i}].content[{j}]")
    return found


# -- Anthropic: streaming, tools, caching ---------------------------------------------------------


def test_anthropic_streams_text_deltas_and_returns_the_whole_text(server: FakeModelServer) -> None:
    server.script(text_reply("Hello there, how can I help?"))
    deltas: list[str] = []

    response = asyncio.run(claude(server).complete(ask("hi"), on_text=deltas.append))

    assert deltas == ["Hello", " there,", " how", " can", " I", " help?"]
    assert response.text == "".join(deltas) == "Hello there, how can I help?"
    assert response.stop_reason == "end_turn"
    assert response.tool_calls == ()
    assert response.model == DEFAULT_MODEL
    assert response.usage.output_tokens > 0
    assert server.requests[0].stream


def test_default_model_is_current_and_raises_no_deprecation_warning(
    server: FakeModelServer,
) -> None:
    from anthropic._data import DEPRECATED_MODELS

    assert DEFAULT_MODEL not in DEPRECATED_MODELS
    server.script(text_reply("ok"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        asyncio.run(claude(server).complete(ask("hi")))
    assert server.requests[0].model == DEFAULT_MODEL


def test_anthropic_tool_use_round_trip(server: FakeModelServer) -> None:
    server.script(
        tool_reply("get_weather", {"city": "Paris"}, id="toolu_1", text="Let me check."),
        text_reply("It is sunny in Paris."),
    )
    client = claude(server)
    first = ask("Weather in Paris?", tools=(WEATHER,))

    async def conversation() -> tuple[ModelResponse, ModelResponse]:
        call = await client.complete(first)
        results = Message.tool_results([ToolResult("toolu_1", "22 °C, sunny")])
        history = (*first.messages, call.to_message(), results)
        return call, await client.complete(replace(first, messages=history))

    call, answer = asyncio.run(conversation())

    assert call.stop_reason == "tool_use"
    assert call.text == "Let me check."
    assert [(c.id, c.name, dict(c.input)) for c in call.tool_calls] == [
        ("toolu_1", "get_weather", {"city": "Paris"})
    ]

    assert answer.text == "It is sunny in Paris."
    sent = server.requests[1].body
    assert sent["tools"][0]["name"] == "get_weather"
    assert sent["tools"][0]["input_schema"] == WEATHER.input_schema
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert sent["messages"][1]["content"][1] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "get_weather",
        "input": {"city": "Paris"},
        "cache_control": {"type": "ephemeral"},
    }
    assert sent["messages"][2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": "22 °C, sunny",
            "is_error": False,
        }
    ]


def test_anthropic_marks_the_stable_prefix_for_caching() -> None:
    history = (
        Message.user("first question"),
        Message.assistant("first answer"),
        Message.user("second question"),
    )
    request = ModelRequest(messages=history, system=SYSTEM, tools=(WEATHER, WEATHER))

    body = anthropic_params(request, DEFAULT_MODEL)

    assert cache_markers(body) == ["tools[1]", "system[1]", "messages[1].content[0]"]
    assert cache_markers(anthropic_params(ask("hi", cache_prefix=False), DEFAULT_MODEL)) == []


def test_anthropic_reports_cache_reads_when_the_prefix_repeats(server: FakeModelServer) -> None:
    server.script(text_reply("Fine."), text_reply("Sure."))
    client = claude(server)
    turn_one = ask("How are you?", tools=(WEATHER,))

    async def conversation() -> tuple[ModelResponse, ModelResponse]:
        first = await client.complete(turn_one)
        history = (*turn_one.messages, first.to_message(), Message.user("And tomorrow?"))
        return first, await client.complete(replace(turn_one, messages=history))

    first, second = asyncio.run(conversation())

    assert first.usage.cache_read_tokens == 0
    assert first.usage.cache_write_tokens > 0  # tools + system written to the cache
    assert second.usage.cache_read_tokens == first.usage.cache_write_tokens
    assert second.usage.cache_write_tokens > 0  # …and now the history up to the new turn
    sent = [r.body for r in server.requests]
    assert cache_markers(sent[0]) == ["tools[0]", "system[1]"]
    assert cache_markers(sent[1]) == ["tools[0]", "system[1]", "messages[1].content[0]"]


# -- the fake server's own protocol details --------------------------------------------------------


def post(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize(
    ("auth_header", "expected"),
    [({"x-api-key": KEY}, "x-api-key"), ({"Authorization": f"Bearer {KEY}"}, "bearer")],
)
def test_fake_server_accepts_x_api_key_or_bearer_and_answers_without_streaming(
    server: FakeModelServer, auth_header: dict[str, str], expected: str
) -> None:
    server.script(text_reply("plain"))
    body = {"model": "claude-x", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"anthropic-version": "2023-06-01", "content-type": "application/json"}

    status, reply = post(f"{server.url}/v1/messages", body, {**headers, **auth_header})

    assert status == 200
    assert reply["content"] == [{"type": "text", "text": "plain"}]
    assert reply["stop_reason"] == "end_turn"
    assert server.requests[0].auth == expected
    assert KEY not in json.dumps(dict(server.requests[0].headers))


def test_fake_server_answers_openai_chat_without_streaming(server: FakeModelServer) -> None:
    server.script(tool_reply("get_weather", {"city": "Oslo"}, id="call_1"))
    body = {"model": "m", "messages": [{"role": "user", "content": "weather?"}]}

    status, reply = post(f"{server.url}/chat/completions", body, {"Authorization": f"Bearer {KEY}"})

    assert status == 200
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Oslo"}',
    }
    assert reply["usage"]["prompt_tokens"] > 0


def test_fake_server_scripts_replies_from_a_function(server: FakeModelServer) -> None:
    def echo(request: RecordedRequest) -> Reply:
        return text_reply(f"you said: {request.last_user_text()}")

    server.respond_with(echo)

    response = asyncio.run(claude(server).complete(ask("ping")))

    assert response.text == "you said: ping"


# -- Anthropic: retries and fallback ---------------------------------------------------------------


def test_anthropic_retries_a_429_after_the_retry_after_the_server_asked_for(
    server: FakeModelServer,
) -> None:
    server.script(error_reply(429, retry_after=0.3), text_reply("made it"))
    started = time.monotonic()

    response = asyncio.run(claude(server).complete(ask("hi")))

    assert response.text == "made it"
    assert len(server.requests) == 2
    assert time.monotonic() - started >= 0.3


def test_anthropic_retries_a_server_error_then_succeeds(server: FakeModelServer) -> None:
    server.script(error_reply(500), error_reply(529), text_reply("recovered"))

    response = asyncio.run(claude(server, max_retries=2).complete(ask("hi")))

    assert response.text == "recovered"
    assert len(server.requests) == 3


def test_rate_limit_that_outlasts_the_retries_is_a_rate_limited_error(
    server: FakeModelServer,
) -> None:
    server.script(error_reply(429, retry_after=0), error_reply(429, retry_after=0))

    with pytest.raises(RateLimitedError) as caught:
        asyncio.run(claude(server, max_retries=1).complete(ask("hi")))

    assert len(server.requests) == 2
    assert "429 after 2 attempts" in str(caught.value)
    # …naming the setting as config.toml spells it (following the advice must work).
    assert "add fallback_models = [...] under [agent]" in str(caught.value)
    assert "fallback_models" in AgentConfig.model_fields


def test_a_long_retry_after_is_not_waited_out(server: FakeModelServer) -> None:
    server.script(error_reply(429, retry_after=600))
    started = time.monotonic()

    with pytest.raises(RateLimitedError, match="asked to wait 600 s"):
        asyncio.run(claude(server).complete(ask("hi")))

    assert len(server.requests) == 1
    assert time.monotonic() - started < 2


def test_fallback_answers_from_the_second_model_when_the_first_keeps_failing(
    server: FakeModelServer,
) -> None:
    def by_model(request: RecordedRequest) -> Reply:
        if request.model == "claude-primary":
            return error_reply(529)
        return text_reply("from the backup")

    server.respond_with(by_model)
    client = FallbackClient(
        [claude(server, "claude-primary", max_retries=1), claude(server, "claude-backup")]
    )

    response = asyncio.run(client.complete(ask("hi")))

    assert response.text == "from the backup"
    assert response.model == "claude-backup"
    assert [r.model for r in server.requests] == ["claude-primary"] * 2 + ["claude-backup"]


def test_fallback_reaches_a_litellm_model_after_a_timeout(server: FakeModelServer) -> None:
    server.script(text_reply("too slow", delay_s=3), text_reply("local answer"))
    client = FallbackClient([claude(server, timeout_s=0.3), openai_compatible(server)])

    response = asyncio.run(client.complete(ask("hi")))

    assert response.model == "openai/local-model"
    assert response.text == "local answer"


def test_fallback_does_not_hide_an_error_the_owner_must_fix(server: FakeModelServer) -> None:
    server.script(error_reply(404, "model: claude-typo"), text_reply("never sent"))
    client = FallbackClient([claude(server, "claude-typo"), claude(server, "claude-backup")])

    with pytest.raises(UnknownModelError):
        asyncio.run(client.complete(ask("hi")))

    assert len(server.requests) == 1


def test_create_model_client_routes_claude_to_anthropic_and_the_rest_to_litellm() -> None:
    assert isinstance(create_model_client("claude-haiku-4-5"), AnthropicClient)
    assert isinstance(create_model_client("anthropic/claude-opus-4-7"), AnthropicClient)
    assert isinstance(create_model_client("ollama/llama3.2"), LiteLLMClient)
    chain = create_model_client(
        "claude-sonnet-4-6", fallbacks=["ollama/llama3.2"], api_base="http://127.0.0.1:9"
    )
    assert isinstance(chain, FallbackClient)
    primary, backup = chain.clients
    assert isinstance(primary, AnthropicClient) and primary.url == "http://127.0.0.1:9"
    assert isinstance(backup, LiteLLMClient) and backup.api_base is None


# -- Anthropic: errors worded as advice ------------------------------------------------------------


def test_missing_key_is_reported_before_any_request(server: FakeModelServer) -> None:
    client = AnthropicClient(base_url=server.url)

    with pytest.raises(MissingKeyError) as caught:
        asyncio.run(client.complete(ask("hi")))

    assert str(caught.value) == (
        "ANTHROPIC_API_KEY is not set: export it, or choose another model with "
        f'model = "ollama/llama3.2" in {config_file_hint()}'
    )
    assert server.requests == []


def test_key_from_the_environment_is_used(
    server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    server.script(text_reply("hello"))

    response = asyncio.run(AnthropicClient(base_url=server.url).complete(ask("hi")))

    assert response.text == "hello"
    assert server.requests[0].auth == "bearer"


def test_rejected_key_is_explained_without_revealing_it(
    server: FakeModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = "sk-wrong-secret-999999"
    caplog.set_level(logging.DEBUG)

    with pytest.raises(AuthenticationFailedError) as caught:
        asyncio.run(claude(server, api_key=wrong).complete(ask("hi")))

    message = str(caught.value)
    assert "rejected the API key from api_key (401)" in message
    assert wrong not in message
    assert wrong not in caplog.text
    assert len(server.requests) == 1  # not retried


def test_unknown_model_names_the_model(server: FakeModelServer) -> None:
    server.script(error_reply(404, "model: claude-nonexistent"))

    with pytest.raises(UnknownModelError) as caught:
        asyncio.run(claude(server, "claude-nonexistent").complete(ask("hi")))

    assert str(caught.value) == (
        f'{server.url} does not know the model "claude-nonexistent" (404): '
        f"check the model name in {config_file_hint()}"
    )


def test_a_model_name_litellm_has_no_provider_for_is_advice_before_any_request(
    server: FakeModelServer,
) -> None:
    client = LiteLLMClient("nonsense-model-xyz", api_base=server.openai_url, max_retries=0)

    with pytest.raises(UnknownProviderError) as caught:
        asyncio.run(client.complete(ask("hi")))

    message = str(caught.value)
    assert 'No provider is known for the model "nonsense-model-xyz"' in message
    assert '"openai/gpt-4.1-mini"' in message and config_file_hint() in message
    assert server.openai_url not in message  # the server was never asked: it is not to blame
    assert server.requests == []


def test_prompt_too_long_is_a_context_error(server: FakeModelServer) -> None:
    server.script(error_reply(400, "prompt is too long: 210000 tokens > 200000 maximum"))

    with pytest.raises(ContextTooLongError, match="prompt is too long"):
        asyncio.run(claude(server).complete(ask("hi")))


def test_connection_refused_names_the_url() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    client = AnthropicClient(api_key=KEY, base_url=url, max_retries=0)

    with pytest.raises(ServerUnreachableError) as caught:
        asyncio.run(client.complete(ask("hi")))

    assert str(caught.value).startswith(f"Cannot reach {url} for {DEFAULT_MODEL}")
    assert "api_base" in str(caught.value)


def test_timeout_says_which_setting_to_raise(server: FakeModelServer) -> None:
    server.script(text_reply("late", delay_s=3))
    started = time.monotonic()

    with pytest.raises(ModelTimeoutError) as caught:
        asyncio.run(claude(server, timeout_s=0.3).complete(ask("hi")))

    assert time.monotonic() - started < 2
    assert "did not finish answering within timeout_s = 0.3 s" in str(caught.value)
    assert "timeout_s" in str(caught.value)
    assert len(server.requests) == 1  # a timeout is not retried by the client itself


def test_a_stream_that_stalls_midway_times_out(server: FakeModelServer) -> None:
    server.script(text_reply("one two three", chunk_delay_s=2))

    with pytest.raises(ModelTimeoutError):
        asyncio.run(claude(server, timeout_s=0.3).complete(ask("hi")))


def test_error_after_text_has_streamed_is_not_retried_and_the_text_is_kept_as_cut_off(
    server: FakeModelServer,
) -> None:
    server.script(text_reply("partial answer", fail_mid_stream=True), text_reply("never sent"))
    deltas: list[str] = []

    response = asyncio.run(claude(server).complete(ask("hi"), on_text=deltas.append))

    assert response.text == "".join(deltas) == "partial answer"
    assert response.cut_off == "the model's server reported an error"
    assert len(server.requests) == 1


def test_cancelling_mid_stream_raises_cancelled_and_closes_the_stream(
    server: FakeModelServer,
) -> None:
    server.script(text_reply("a long answer " * 20, chunk_delay_s=0.05))

    async def scenario() -> None:
        first_text = asyncio.Event()
        task = asyncio.create_task(
            claude(server).complete(ask("hi"), on_text=lambda _: first_text.set())
        )
        await asyncio.wait_for(first_text.wait(), timeout=5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())

    deadline = time.monotonic() + 5
    while server.aborted_streams == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.aborted_streams == 1


# -- litellm ---------------------------------------------------------------------------------------


def test_litellm_streams_text_and_reports_usage(server: FakeModelServer) -> None:
    server.script(text_reply("Hi from a local model."))
    deltas: list[str] = []

    response = asyncio.run(openai_compatible(server).complete(ask("hi"), on_text=deltas.append))

    assert deltas == ["Hi", " from", " a", " local", " model."]
    assert response.text == "Hi from a local model."
    assert response.stop_reason == "end_turn"
    assert response.model == "openai/local-model"
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    sent = server.requests[0].body
    assert sent["model"] == "local-model"
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["messages"] == [
        {"role": "system", "content": "\n\n".join(SYSTEM)},
        {"role": "user", "content": "hi"},
    ]


def test_litellm_tool_calls_round_trip(server: FakeModelServer) -> None:
    server.script(
        tool_reply("get_weather", {"city": "Oslo"}, id="call_1"),
        text_reply("Cold in Oslo."),
    )
    client = openai_compatible(server)
    first = ask("Weather in Oslo?", tools=(WEATHER,))

    async def conversation() -> tuple[ModelResponse, ModelResponse]:
        call = await client.complete(first)
        results = Message.tool_results([ToolResult("call_1", "-5 °C")])
        history = (*first.messages, call.to_message(), results)
        return call, await client.complete(replace(first, messages=history))

    call, answer = asyncio.run(conversation())

    assert call.stop_reason == "tool_use"
    assert [(c.id, c.name, dict(c.input)) for c in call.tool_calls] == [
        ("call_1", "get_weather", {"city": "Oslo"})
    ]

    assert answer.text == "Cold in Oslo."
    sent = server.requests[1].body
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": WEATHER.description,
                "parameters": WEATHER.input_schema,
            },
        }
    ]
    assistant, tool = sent["messages"][2], sent["messages"][3]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"][0]["id"] == "call_1"
    assert assistant["tool_calls"][0]["function"]["name"] == "get_weather"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"city": "Oslo"}
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": "-5 °C"}


def test_litellm_reports_cached_prompt_tokens(server: FakeModelServer) -> None:
    server.script(text_reply("one"), text_reply("two"))
    client = openai_compatible(server)

    async def twice() -> tuple[ModelResponse, ModelResponse]:
        return await client.complete(ask("same question")), await client.complete(
            ask("same question")
        )

    first, second = asyncio.run(twice())

    assert first.usage.cache_read_tokens == 0
    assert second.usage.cache_read_tokens == first.usage.prompt_tokens
    assert second.usage.input_tokens == 0


def test_litellm_retries_a_429_then_succeeds(server: FakeModelServer) -> None:
    server.script(error_reply(429, retry_after=0.1), text_reply("ok"))

    response = asyncio.run(openai_compatible(server).complete(ask("hi")))

    assert response.text == "ok"
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    ("reply", "error", "wording"),
    [
        (error_reply(404), UnknownModelError, 'does not know the model "openai/local-model"'),
        (error_reply(401), AuthenticationFailedError, "rejected the API key from api_key (401)"),
        (error_reply(400, "bad tool schema"), RequestRefusedError, "(400)"),
        (error_reply(429), RateLimitedError, "429 after 1 attempt"),
        (error_reply(503), ServerError, "after 1 attempt"),
        (text_reply("cut short", fail_mid_stream=True), ServerError, "the stream broke off"),
    ],
)
def test_litellm_maps_failures_to_model_errors(
    server: FakeModelServer, reply: Reply, error: type[Exception], wording: str
) -> None:
    server.script(reply)

    with pytest.raises(error) as caught:
        asyncio.run(openai_compatible(server, max_retries=0).complete(ask("hi")))

    assert wording in str(caught.value)
    assert KEY not in str(caught.value)


def test_litellm_connection_refused_names_the_url() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    client = LiteLLMClient("openai/local-model", api_base=url, max_retries=0)

    with pytest.raises(ServerUnreachableError, match=f"Cannot reach {url} .*connection refused"):
        asyncio.run(client.complete(ask("hi")))


def test_litellm_ollama_unreachable_suggests_starting_it() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    client = LiteLLMClient("ollama/llama3.2", api_base=url, max_retries=0)

    with pytest.raises(ServerUnreachableError, match="ollama serve"):
        asyncio.run(client.complete(ask("hi")))


def test_litellm_timeout(server: FakeModelServer) -> None:
    server.script(text_reply("late", delay_s=3))

    with pytest.raises(ModelTimeoutError, match="timeout_s"):
        asyncio.run(openai_compatible(server, timeout_s=0.3).complete(ask("hi")))


def test_litellm_missing_provider_key_is_reported_before_any_request() -> None:
    with pytest.raises(MissingKeyError, match=r"^OPENAI_API_KEY is not set: export it"):
        asyncio.run(LiteLLMClient("openai/gpt-4o").complete(ask("hi")))


def test_litellm_cancelling_mid_stream_raises_cancelled(server: FakeModelServer) -> None:
    server.script(text_reply("a long answer " * 20, chunk_delay_s=0.05))

    async def scenario() -> None:
        first_text = asyncio.Event()
        task = asyncio.create_task(
            openai_compatible(server).complete(ask("hi"), on_text=lambda _: first_text.set())
        )
        await asyncio.wait_for(first_text.wait(), timeout=5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())


def test_ollama_model_streams_and_calls_tools_over_the_chat_api(server: FakeModelServer) -> None:
    server.script(
        text_reply("Hello from llama."),
        tool_reply("get_weather", {"city": "Rome"}),
    )
    client = LiteLLMClient("ollama/llama3.2", api_base=server.url)
    deltas: list[str] = []

    async def conversation() -> tuple[ModelResponse, ModelResponse]:
        greeting = await client.complete(ask("hi"), on_text=deltas.append)
        return greeting, await client.complete(ask("Weather in Rome?", tools=(WEATHER,)))

    greeting, call = asyncio.run(conversation())

    assert greeting.text == "".join(deltas) == "Hello from llama."
    assert greeting.usage.input_tokens > 0
    assert call.stop_reason == "tool_use"
    assert [(c.name, dict(c.input)) for c in call.tool_calls] == [("get_weather", {"city": "Rome"})]
    assert call.tool_calls[0].id  # Ollama sends none; one is made up to pair the result
    sent = server.requests[1]
    assert sent.path == "/api/chat"
    assert sent.body["tools"][0]["function"]["name"] == "get_weather"
