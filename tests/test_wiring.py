"""build_runtime: the one composition root the chat, the gateway and the scheduler share."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent.requests import AgentRequest, Final
from app.cli.main import TEMPLATE_DIR
from app.cli.setup import initialise
from app.config import Settings
from app.wiring import build_runtime
from memory.store.sessions import SessionKey
from tests.fakes.model_server import FakeModelServer, text_reply


@pytest.fixture
def settings(pinch_home: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    return Settings(
        home=pinch_home,
        agent={"model": "claude-test", "max_retries": 0, "timezone": "Europe/Berlin"},
        memory={"embedding": {"provider": "none"}},
    )


def test_a_built_runtime_answers_from_the_configured_model_and_stores_the_turn(
    settings: Settings,
) -> None:
    initialise(settings, TEMPLATE_DIR)

    async def one_turn(url: str) -> tuple[str, int]:
        configured = settings.model_copy(
            update={"agent": settings.agent.model_copy(update={"api_base": url})}
        )
        async with await build_runtime(configured) as runtime:
            await runtime.start()  # index synced, watcher running
            events = [
                e async for e in runtime.agent.run(AgentRequest(SessionKey.owner_main(), "Hi"))
            ]
            final = events[-1]
            assert isinstance(final, Final)
            stored = len(runtime.store.events(final.reply.session_id))
            assert runtime.agent.clock.zone_name == "Europe/Berlin"
            return final.reply.text, stored

    with FakeModelServer(api_key="test-key") as server:
        server.script(text_reply("Hello from the runtime."))
        text, stored = asyncio.run(one_turn(server.url))
    assert (text, stored) == ("Hello from the runtime.", 2)
    assert settings.database_path.exists()


def test_closing_a_runtime_twice_is_harmless_and_closes_the_database(settings: Settings) -> None:
    initialise(settings, TEMPLATE_DIR)

    async def open_and_close() -> None:
        runtime = await build_runtime(settings)
        await runtime.aclose()
        await runtime.aclose()
        with pytest.raises(Exception):  # noqa: B017 - any use of a closed database fails
            runtime.index.db.execute("SELECT 1")

    asyncio.run(open_and_close())


def test_the_start_up_sync_compacts_after_a_rebuild_and_starts_reading_the_vectors(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, use_model: None
) -> None:
    from memory.memory_config import ChunkingConfig, EmbeddingConfig
    from memory.search import matrix_cache
    from memory.store.compact import space_usage

    initialise(settings, TEMPLATE_DIR)
    notes = settings.workspace_dir / "memory"
    for day in range(1, 21):
        lines = "\n".join(f"- Note {day}-{i} about the garden and the boiler." for i in range(30))
        (notes / f"2026-01-{day:02d}.md").write_text(f"# 2026-01-{day:02d}\n\n{lines}\n")
    with_vectors = settings.model_copy(
        update={
            "memory": settings.memory.model_copy(
                update={"embedding": EmbeddingConfig(provider="use")}
            )
        }
    )
    preloaded: list[int] = []
    real = matrix_cache.MatrixCache.preload
    monkeypatch.setattr(
        matrix_cache.MatrixCache,
        "preload",
        lambda self, generation: preloaded.append(generation) or real(self, generation),
    )

    async def start(config: Settings) -> float:
        async with await build_runtime(config) as runtime:
            await runtime.sync_index()
            return space_usage(runtime.index.db).free_share

    rechunked = with_vectors.model_copy(
        update={
            "memory": with_vectors.memory.model_copy(
                update={"chunking": ChunkingConfig(tokens=300, overlap=60)}
            )
        }
    )
    asyncio.run(start(with_vectors))
    # New chunking: the start-up sync rebuilds, the old index's pages are freed, it compacts.
    free_after_rebuild = asyncio.run(start(rechunked))

    assert free_after_rebuild < 0.25
    assert preloaded  # the vectors are being read before the first message


def test_without_a_configured_zone_the_owner_zone_comes_from_user_md(settings: Settings) -> None:
    no_zone = settings.model_copy(
        update={"agent": settings.agent.model_copy(update={"timezone": None})}
    )
    initialise(no_zone, TEMPLATE_DIR)  # the template's example zone is in a comment
    user = no_zone.workspace_dir / "USER.md"
    user.write_text(
        user.read_text(encoding="utf-8")
        + "\n<!-- observed: 2026-01-02 | status: superseded -->\n- Time zone: Asia/Tokyo\n"
        + "- Time zone: America/New_York <!-- observed: 2026-03-01 | status: active -->\n",
        encoding="utf-8",
    )

    assert asyncio.run(_zone_of(no_zone)) == "America/New_York"
    # [agent] timezone still wins.
    assert asyncio.run(_zone_of(settings)) == "Europe/Berlin"


async def _zone_of(settings: Settings) -> str:
    async with await build_runtime(settings) as runtime:
        return runtime.agent.clock.zone_name


def test_the_agent_is_handed_one_tool_registry_shared_by_its_compactor_and_recall(
    settings: Settings,
) -> None:
    from agent.active_memory import ActiveMemory

    initialise(settings, TEMPLATE_DIR)

    async def built() -> None:
        async with await build_runtime(settings) as runtime:
            agent = runtime.agent
            assert isinstance(agent.recall, ActiveMemory)
            assert agent.recall.tools is agent.tools
            assert agent.compactor.tools is agent.tools
            names = {spec.name for spec in agent.tools.specs}
            assert {"memory_search", "remember", "web_fetch", "intent"} <= names

    asyncio.run(built())


def test_the_chat_gateway_claims_only_its_terminal_rows_and_writes_no_heartbeat(
    settings: Settings,
) -> None:
    from app.wiring import build_gateway
    from channels.base import Channel

    initialise(settings, TEMPLATE_DIR)

    async def built() -> None:
        async with await build_runtime(settings) as runtime:
            channels: dict[str, Channel] = {}
            gateway = build_gateway(settings, runtime, channels)
            chat = build_gateway(settings, runtime, channels, chat_claimant="cli-1")
            assert gateway.store.store.claimant is None
            assert gateway.options.heartbeat_path == settings.home / "gateway.heartbeat"
            assert chat.store.store.claimant == "cli-1"
            assert chat.options.heartbeat_path is None
            assert gateway.runtime is runtime and chat.runtime is runtime

    asyncio.run(built())
