"""Building a real Agent for tests: a workspace, the agent SQLite in tmp_path, a keyword-only
memory index, and the real anthropic SDK or litellm pointed at the scripted FakeModelServer."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo

from agent.agent_config import AgentConfig
from agent.media.media_config import MediaConfig, VoiceConfig
from agent.model.factory import AnthropicClient, LiteLLMClient, ModelClient
from agent.projects import ProjectDirectory
from agent.runtime import Agent
from agent.web_fetch import WebFetcher
from app.wiring import build_agent
from common.clock import Clock
from memory.index.index import MemoryIndex
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.store.sessions import SessionKey, SessionStore, SqliteSessionStore
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply

TEMPLATE = Path(__file__).resolve().parents[1] / "workspace_template"
BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 1, 10, 13, 30, tzinfo=UTC)  # 14:30 in Berlin
OWNER = SessionKey.owner_cli()
GROUP = SessionKey("main", "telegram", "group", "-100200")
FLUSH_MARK = "Pre-compaction memory flush"
SUMMARY_MARK = "You summarise a conversation"
SLUG_MARK = "Name this conversation for a file name"

Api = Literal["anthropic", "openai"]


def fixed_clock() -> Clock:
    return Clock(BERLIN, utcnow=lambda: NOW)


def template_workspace(root: Path, **files: str) -> Path:
    """A copy of workspace_template/ under `root`, with `files` (name → text) written over it."""
    workspace = root / "workspace"
    shutil.copytree(TEMPLATE, workspace)
    (workspace / "memory").mkdir(exist_ok=True)
    for name, text in files.items():
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return workspace


def small_workspace(root: Path, **files: str) -> Path:
    """A workspace with one short AGENTS.md (small fixed overhead, for compaction tests)."""
    workspace = root / "workspace"
    (workspace / "memory").mkdir(parents=True, exist_ok=True)
    (workspace / "AGENTS.md").write_text("# AGENTS.md\nBe brief.\n", encoding="utf-8")
    for name, text in files.items():
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return workspace


def model_client(
    server: FakeModelServer, api: Api = "anthropic", litellm_model: str = "openai/fake-model"
) -> ModelClient:
    if api == "anthropic":
        return AnthropicClient(
            "claude-test", api_key="test-key", base_url=server.url, timeout_s=10, max_retries=0
        )
    return LiteLLMClient(
        litellm_model,
        api_base=server.openai_url,
        api_key="test-key",
        timeout_s=10,
        max_retries=0,
    )


@dataclass
class Kit:
    """An agent and everything it talks to."""

    agent: Agent
    server: FakeModelServer
    index: MemoryIndex
    store: SessionStore
    workspace: Path


def make_kit(
    tmp_path: Path,
    server: FakeModelServer,
    *,
    workspace: Path | None = None,
    api: Api = "anthropic",
    memory: MemoryConfig | None = None,
    db_name: str = "agent.sqlite",
    fetcher: WebFetcher | None = None,
    projects: ProjectDirectory | None = None,
    media: tuple[VoiceConfig, MediaConfig] | None = None,
    litellm_model: str = "openai/fake-model",
    **config: Any,
) -> Kit:
    """A fresh Agent object on `tmp_path/db_name`; calling it twice simulates a restart. With
    `media` ([voice], [media]) it reads voice notes, images and documents."""
    workspace = workspace or template_workspace(tmp_path)
    memory = memory or MemoryConfig(embedding=EmbeddingConfig(provider="none"))
    index = MemoryIndex.open(workspace, tmp_path / db_name, memory)
    store = SqliteSessionStore(index.db)
    agent = build_agent(
        model=model_client(server, api, litellm_model),
        store=store,
        index=index,
        workspace=workspace,
        config=AgentConfig(model="claude-test", **config),
        clock=fixed_clock(),
        fetcher=fetcher,
        projects=projects,
        media=media,
    )
    return Kit(agent, server, index, store, workspace)


def kind_of(request: RecordedRequest) -> str:
    """ "flush", "summary", "slug" or "turn": what a request the server received was for."""
    if SUMMARY_MARK in request.system_text():
        return "summary"
    last = request.last_user_text()
    if FLUSH_MARK in last:
        return "flush"
    if SLUG_MARK in last:
        return "slug"
    return "turn"


Answer = Reply | Callable[[RecordedRequest], Reply]


def responder(
    *,
    flush: Answer | None = None,
    summary: Answer | None = None,
    slug: Answer | None = None,
    turn: Answer | None = None,
) -> Callable[[RecordedRequest], Reply]:
    """A FakeModelServer responder answering each kind of request its own way (a fixed reply,
    or a function of the request)."""
    answers: dict[str, Answer] = {
        "flush": flush or text_reply("NO_REPLY"),
        "summary": summary or text_reply(SUMMARY),
        "slug": slug or text_reply("chat"),
        "turn": turn or text_reply("OK."),
    }

    def respond(request: RecordedRequest) -> Reply:
        answer = answers[kind_of(request)]
        return answer if isinstance(answer, Reply) else answer(request)

    return respond


SUMMARY = """## Decisions
- none
## Open TODOs
- none
## Constraints/Rules
- none
## Pending user asks
- none
## Exact identifiers
- none"""


def tool_results(request: RecordedRequest) -> list[dict[str, Any]]:
    """Every tool result in a request, as {"content", "is_error"} (Anthropic or OpenAI shape)."""
    found = []
    for message in request.body.get("messages", []):
        if message.get("role") == "tool":
            content = str(message.get("content"))
            found.append({"content": content, "is_error": content.startswith("Error:")})
        elif isinstance(message.get("content"), list):
            for block in message["content"]:
                if block.get("type") == "tool_result":
                    found.append(
                        {"content": str(block["content"]), "is_error": bool(block.get("is_error"))}
                    )
    return found


def all_text(request: RecordedRequest) -> str:
    """Everything a request carried, as one string, for "is X in there" checks."""
    return json.dumps(request.body, ensure_ascii=False)
