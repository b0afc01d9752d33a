"""Model faults: what a broken, slow, chatty or oversized exchange with a model server does.

The real anthropic SDK and litellm talk to the scripted FakeModelServer, which answers with the
faults real servers and proxies produce (a web page, an empty or cut JSON body, a garbage event
stream, keep-alives and nothing else, an answer that stops mid-sentence, a key echoed in an
error). What must hold: every fault is one `ModelError` line worded as advice, `timeout_s` bounds
the whole call, a cut-off answer is kept and marked, no key is ever shown, and an oversized
message is cut once before anything is sent.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from click.testing import CliRunner

from agent.message_limit import MAX_MESSAGE_CHARS, message_token_limit
from agent.model.errors import (
    BadResponseError,
    ContextTooLongError,
    ModelError,
    ModelTimeoutError,
    RequestRefusedError,
)
from agent.model.factory import AnthropicClient, FallbackClient, LiteLLMClient, ModelClient
from agent.types import Message, ModelRequest
from app.cli.main import main
from memory.embeddings.litellm_env import import_litellm
from tests.agent_support import OWNER, make_kit, small_workspace
from tests.fakes.model_server import (
    FakeModelServer,
    Fault,
    error_reply,
    fault_reply,
    refuse_long_prompts,
    text_reply,
)

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning:litellm.*"),
    pytest.mark.filterwarnings("ignore:.*ReadOnly. qualifier:UserWarning"),
]

AgentApi = Literal["anthropic", "openai"]
Api = AgentApi | Literal["ollama"]
APIS: tuple[AgentApi, ...] = ("anthropic", "openai")  # what tests/agent_support can build
CLIENT_APIS: tuple[Api, ...] = (*APIS, "ollama")
KEY = "sk-test-fault-key-0123456789abcdef"
UNREADABLE: tuple[Fault, ...] = ("html", "empty", "malformed_json", "garbage_stream")
# A test that the old code would hang in fails after this long instead.
GUARD_S = 30.0


@pytest.fixture(scope="module")
def sdks() -> None:
    """Both SDKs imported (seconds each), so that tests timing a call time only the call."""
    importlib.import_module("anthropic")
    import_litellm()


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as fake:
        yield fake


@pytest.fixture(autouse=True)
def no_provider_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("ANTHROPIC_", "OPENAI_")):
            monkeypatch.delenv(name)


def client(server: FakeModelServer, api: Api, **options: Any) -> ModelClient:
    options.setdefault("timeout_s", 5.0)
    options.setdefault("max_retries", 0)
    if api == "anthropic":
        options.setdefault("api_key", KEY)
        return AnthropicClient("claude-test", base_url=server.url, **options)
    if api == "ollama":
        return LiteLLMClient("ollama/llama3.2", api_base=server.url, **options)
    options.setdefault("api_key", KEY)
    return LiteLLMClient("openai/fake-model", api_base=server.openai_url, **options)


def ask(text: str = "hi") -> ModelRequest:
    return ModelRequest(messages=(Message.user(text),), system="You are Pinch.")


def complete(model: ModelClient, on_text: Any = None) -> Any:
    """One call, bounded from outside so that a hang fails the test rather than the suite."""

    async def call() -> Any:
        try:
            return await asyncio.wait_for(model.complete(ask(), on_text), GUARD_S)
        finally:
            for each in getattr(model, "clients", [model]):
                close = getattr(each, "aclose", None)
                if close is not None:
                    await close()

    return asyncio.run(call())


# -- answers that are not the API's ---------------------------------------------------------------


@pytest.mark.parametrize("api", CLIENT_APIS)
@pytest.mark.parametrize("fault", UNREADABLE)
def test_a_200_answer_that_is_not_the_api_is_one_line_of_advice_and_not_retried(
    server: FakeModelServer, api: Api, fault: Fault
) -> None:
    server.script(fault_reply(fault), text_reply("never sent"))

    with pytest.raises(BadResponseError) as caught:
        complete(client(server, api, max_retries=2))

    message = str(caught.value)
    assert "\n" not in message
    assert "not the model API's format" in message
    assert "api_base" in message  # what to check
    assert len(server.requests) == 1  # the same server would answer the same way


def test_a_fallback_model_answers_when_the_first_server_sends_a_web_page(
    server: FakeModelServer,
) -> None:
    server.script(fault_reply("html"), text_reply("From the local model."))
    chain = FallbackClient([client(server, "anthropic"), client(server, "openai")])

    response = complete(chain)

    assert response.text == "From the local model."
    assert response.model == "openai/fake-model"


# -- timeout_s bounds the whole call -------------------------------------------------------------


@pytest.mark.parametrize("api", CLIENT_APIS)
def test_keep_alive_bytes_without_content_time_out_after_timeout_s(
    server: FakeModelServer, api: Api, sdks: None
) -> None:
    server.script(fault_reply("keepalive_only", chunk_delay_s=0.05))
    started = time.monotonic()

    with pytest.raises(ModelTimeoutError, match=r"within timeout_s = 0\.5 s"):
        complete(client(server, api, timeout_s=0.5))

    assert time.monotonic() - started < 3.0  # without the deadline: as long as the server beats


def test_timeout_s_bounds_the_retries_and_their_waits_too(
    server: FakeModelServer, sdks: None
) -> None:
    server.respond_with(lambda request: error_reply(500, delay_s=0.3))
    started = time.monotonic()

    with pytest.raises(ModelError):
        complete(client(server, "anthropic", timeout_s=1.0, max_retries=5))

    assert time.monotonic() - started < 2.5  # five retries with their waits would take > 6 s
    assert len(server.requests) < 6


# -- answers cut off mid-stream ------------------------------------------------------------------


@pytest.mark.parametrize("api", CLIENT_APIS)
def test_a_stream_cut_off_mid_answer_is_returned_marked_cut_off(
    server: FakeModelServer, api: Api
) -> None:
    server.script(fault_reply("cut_off", text="The first half of"), text_reply("never sent"))
    deltas: list[str] = []

    response = complete(client(server, api, max_retries=2), deltas.append)

    assert response.text == "".join(deltas) == "The first half of"
    assert response.cut_off == "the connection to the model ended early"
    assert response.tool_calls == ()
    assert len(server.requests) == 1  # the owner has seen the text: not asked again


@pytest.mark.parametrize("api", CLIENT_APIS)
def test_a_cut_off_stream_nobody_was_shown_is_asked_again(
    server: FakeModelServer, api: Api
) -> None:
    server.script(fault_reply("cut_off"), text_reply("The whole answer."))

    response = complete(client(server, api, max_retries=1))

    assert response.text == "The whole answer."
    assert response.cut_off is None
    assert len(server.requests) == 2


@pytest.mark.parametrize("api", CLIENT_APIS)
def test_an_answer_cut_off_by_the_deadline_is_kept_marked_cut_off(
    server: FakeModelServer, api: Api
) -> None:
    server.script(text_reply(" ".join(["word"] * 20), chunk_delay_s=0.2))  # 4 s or more
    deltas: list[str] = []

    response = complete(client(server, api, timeout_s=2.5), deltas.append)

    assert deltas and response.text == "".join(deltas)
    assert response.cut_off == "it took longer than timeout_s = 2.5 s"


# -- secrets ------------------------------------------------------------------------------------


def test_a_key_from_the_environment_echoed_in_a_400_is_never_shown(
    server: FakeModelServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # the client sends it; the server echoes it
    server.script(fault_reply("echo_key"))
    caplog.set_level(logging.DEBUG)

    with pytest.raises(RequestRefusedError) as caught:
        complete(client(server, "openai", api_key=None))

    assert "Incorrect API key provided: [redacted]" in str(caught.value)
    assert KEY not in str(caught.value)
    assert KEY not in caplog.text


def test_a_key_shaped_value_in_a_server_message_is_never_shown(server: FakeModelServer) -> None:
    other = "sk-ant-api03-" + "x" * 40  # a key Pinch was never given, in the server's words
    server.script(error_reply(400, f"bad request (sent by a proxy holding {other})"))

    with pytest.raises(RequestRefusedError) as caught:
        complete(client(server, "anthropic"))

    assert other not in str(caught.value)
    assert "[redacted]" in str(caught.value)


# -- the agent: cut-off answers and oversized messages ---------------------------------------------


def stored(kit: Any, kind: str) -> list[dict[str, Any]]:
    return [
        e.content for s in kit.store.all_sessions() for e in kit.store.events(s.id, kinds=(kind,))
    ]


@pytest.mark.parametrize("api", APIS)
def test_a_cut_off_answer_is_stored_marked_incomplete_and_the_owner_told(
    tmp_path: Path, server: FakeModelServer, api: AgentApi
) -> None:
    kit = make_kit(tmp_path, server, api=api)
    server.script(fault_reply("cut_off", text="Your dentist appointment is on"))
    shown: list[str] = []

    reply = asyncio.run(kit.agent.handle(OWNER, "When is the dentist?", on_text=shown.append))

    notice = (
        "(The answer was cut off: the connection to the model ended early. Ask again, or say "
        '"go on", for the rest.)'
    )
    assert reply.text == f"Your dentist appointment is on\n\n{notice}"
    assert "".join(shown) == reply.text  # streamed as the owner reads it
    assert stored(kit, "assistant") == [
        {"text": "Your dentist appointment is on", "incomplete": True}
    ]


def oversized_kit(tmp_path: Path, server: FakeModelServer) -> Any:
    return make_kit(
        tmp_path,
        server,
        workspace=small_workspace(tmp_path),
        context_window=8_000,
        reserve_floor=1_000,
        soft_threshold=500,
    )


def test_an_oversized_message_is_cut_once_before_any_request_and_the_owner_told(
    tmp_path: Path, server: FakeModelServer
) -> None:
    kit = oversized_kit(tmp_path, server)
    server.respond_with(refuse_long_prompts(100_000, text_reply("Got the first part.")))
    message = "A line of a very long paste.\n" * 36_000  # ~1 MB

    reply = asyncio.run(kit.agent.handle(OWNER, message))

    limit = message_token_limit(kit.agent.config)
    assert reply.text.startswith(f"(Your message was too long: {len(message):,} characters")
    assert reply.text.endswith("Got the first part.")
    [request] = server.requests
    sent = request.last_user_text()
    assert len(sent) < limit * 4 + 300
    [user] = stored(kit, "user")
    assert user["text"] == sent
    assert user["text"].endswith("The rest was not kept.]")
    assert len(kit.store.all_sessions()) == 1
    hits = kit.index.search("Pinch cut this message", scopes=("", OWNER.memory_scope))
    assert hits is not None  # stored in a form the transcript index can take


def test_a_message_the_server_still_refuses_is_sent_once_stored_once_in_one_session(
    tmp_path: Path, server: FakeModelServer
) -> None:
    kit = oversized_kit(tmp_path, server)
    server.respond_with(refuse_long_prompts(4_000))  # smaller than the window Pinch was told
    message = "x" * 1_000_000

    with pytest.raises(ContextTooLongError) as caught:
        asyncio.run(kit.agent.handle(OWNER, message))

    assert len(server.requests) == 1
    assert len(stored(kit, "user")) == 1
    assert len(kit.store.all_sessions()) == 1
    assert "context_window" in str(caught.value)  # the likely misconfiguration, named


@pytest.mark.parametrize("api", APIS)
def test_a_413_request_too_large_is_a_context_error(server: FakeModelServer, api: AgentApi) -> None:
    server.respond_with(refuse_long_prompts(1, status=413))

    with pytest.raises(ContextTooLongError):
        complete(client(server, api))


def test_a_message_longer_than_the_hard_cap_is_cut_whatever_the_window(
    tmp_path: Path, server: FakeModelServer
) -> None:
    kit = make_kit(tmp_path, server, context_window=2_000_000)
    server.script(text_reply("OK."))

    asyncio.run(kit.agent.handle(OWNER, "word " * 200_000))

    assert len(server.requests[0].last_user_text()) <= MAX_MESSAGE_CHARS + 300


# -- `pinch chat` with piped input, end to end ---------------------------------------------------

FAULT_LINES: tuple[Fault, ...] = (*UNREADABLE, "keepalive_only", "echo_key", "cut_off")


def user_messages(home: Path) -> list[str]:
    """Every stored user message, in order; asserts they all are in one session."""
    database = next(home.glob("agents/*/agent.sqlite"))
    with sqlite3.connect(database) as conn:
        rows = conn.execute(
            "SELECT session_id, content FROM transcript_events WHERE kind = 'user' "
            "ORDER BY created_at"
        ).fetchall()
        sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
    assert sessions == 1 and len({session for session, _ in rows}) <= 1
    return [json.loads(content)["text"] for _, content in rows]


@pytest.fixture
def piped_home(pinch_home: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PINCH_AGENT__MAX_RETRIES", "0")
    monkeypatch.setenv("PINCH_AGENT__TIMEOUT_S", "3")  # the keep-alive line waits this long
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    assert CliRunner().invoke(main, ["init"]).exit_code == 0
    return pinch_home


def use_api(api: Api, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    if api == "anthropic":
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("PINCH_AGENT__MODEL", "claude-test")
        monkeypatch.setenv("PINCH_AGENT__API_BASE", server.url)
    else:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("PINCH_AGENT__MODEL", "openai/fake-model")
        monkeypatch.setenv("PINCH_AGENT__API_BASE", server.openai_url)


@pytest.mark.parametrize("api", APIS)
def test_piped_chat_meets_every_fault_with_one_line_and_stores_every_message(
    piped_home: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch, api: Api
) -> None:
    use_api(api, server, monkeypatch)
    server.script(
        *(fault_reply(f, chunk_delay_s=0.05 * (f == "keepalive_only")) for f in FAULT_LINES)
    )
    server.script(text_reply("Still here."))
    lines = [f"message {i} ({fault})" for i, fault in enumerate(FAULT_LINES)] + ["last"]

    done = CliRunner().invoke(main, ["chat"], input="".join(f"{line}\n" for line in lines))

    assert done.exception is None or isinstance(done.exception, SystemExit), done.output
    errors = done.stderr.strip().splitlines()
    # One line per fault; the cut-off answer is shown on stdout, with its notice.
    assert len(errors) == len(FAULT_LINES) - 1, done.stderr
    assert all(len(line) < 500 for line in errors)
    assert KEY not in done.stdout + done.stderr
    assert "The answer starts here and\n\n(The answer was cut off:" in done.stdout
    assert done.stdout.rstrip().endswith("Still here.")
    assert user_messages(piped_home) == lines
    assert done.exit_code == 1  # some messages got no answer: a script notices


def test_piped_chat_cuts_a_one_megabyte_line_once_and_goes_on(
    piped_home: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_api("anthropic", server, monkeypatch)
    monkeypatch.setenv("PINCH_AGENT__CONTEXT_WINDOW", "8000")
    monkeypatch.setenv("PINCH_AGENT__RESERVE_FLOOR", "1000")
    monkeypatch.setenv("PINCH_AGENT__SOFT_THRESHOLD", "500")
    server.respond_with(refuse_long_prompts(32_000))  # ~8,000 tokens: the configured window
    big = "y" * 1_000_000

    done = CliRunner().invoke(main, ["chat"], input=f"{big}\nshort\n")

    assert done.exit_code == 0, done.stderr
    assert done.stdout.startswith("(Your message was too long: 1,000,000 characters")
    assert done.stdout.count("OK.") == 2
    assert len(server.requests) == 2  # one request per message
    first, second = user_messages(piped_home)
    assert len(first) < 20_000 and first.endswith("The rest was not kept.]")
    assert second == "short"


def test_piped_chat_over_litellm_prints_only_the_reply(
    piped_home: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real `pinch` process: litellm's own INFO lines ("LiteLLM completion() model= …")
    must not land in the replies on stdout; its records go through Pinch's (redacted) logging."""
    import subprocess
    import sys

    use_api("openai", server, monkeypatch)
    server.script(text_reply("Plain answer."))

    done = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "chat"],
        input="hello\n",
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Plain answer."
    assert "LiteLLM" not in done.stdout + done.stderr
