"""The composition root: the one place the memory index, session store, watcher, model client,
`Agent` (with its tools, writer, intents, context builder, compactor and recall), channels and
`Gateway` are built from settings and wired together; everything else receives what it uses.

    runtime = await build_runtime(settings)
    try:
        async for event in runtime.agent.run(AgentRequest(key, text)): ...
    finally:
        await runtime.aclose()
    gateway = build_gateway(settings, runtime, build_channels(settings, print))

`pinch gateway` (app/gateway/run.py) and `pinch chat` (app/gateway/repl.py) build here; nothing
else constructs an `Agent` or a `Gateway` from settings (tests and benchmarks use `build_agent`).
Building the runtime opens the agent database and the index (blocking work, done in a worker
thread) but neither syncs the index nor starts the watcher nor the MCP servers: `await
runtime.start()` does all three; the chat and the gateway call `sync_index()`, `watcher.start()`
and `start_mcp()` themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from agent.active_memory import ActiveMemory
from agent.agent_config import AgentConfig
from agent.compaction import Compactor
from agent.context import ContextBuilder
from agent.intent_tool import IntentTool
from agent.mcp.mcp_tools import McpServers
from agent.media.media_config import MediaConfig, VoiceConfig
from agent.media.reader import MediaReader
from agent.media.transcribe import create_transcriber
from agent.memory_tools import MemoryTools
from agent.model.factory import ModelClient, create_model_client, preload, supports_images
from agent.model.litellm_client import load_litellm
from agent.projects import ProjectDirectory
from agent.runtime import Agent
from agent.skills import Skills
from agent.tools import Tool
from agent.web_fetch import WebFetcher
from app.automations.assembly import build_automations
from app.channel_registry import CHANNELS, Owners, adapter_class, channel_settings
from app.config_layers import env_prefix
from app.gateway.access import Access, Pairing
from app.gateway.healthz import HealthServer
from app.gateway.heartbeat import HEARTBEAT_FILE, heartbeat_dir
from app.gateway.queue import GatewayStore
from app.gateway.server import Gateway, GatewayOptions
from app.gateway.workers import TurnSlots
from app.process import Runtime
from app.store_backend import check_store_backend
from app.store_factory import open_memory_index
from app.web.auth import web_page_wanted
from channels.base import Channel
from common.channel_table import WEB
from common.clock import Clock, owner_zone
from memory.files.inbox import Inbox
from memory.files.writes import WorkspaceWriter
from memory.index.index import MemoryIndex
from memory.index.watch import MemoryWatcher
from memory.lifecycle.intents import IntentStore
from memory.lifecycle.signals import stop_recording
from memory.store.agent_leases import AgentLeaseStore, SqliteAgentLeaseStore
from memory.store.backends import store_for
from memory.store.db import open_database
from memory.store.sessions import SessionStore

if TYPE_CHECKING:
    from app.config import Settings
    from app.web.server import WebServer

log = logging.getLogger(__name__)


async def build_runtime(
    settings: Settings, *, model: ModelClient | None = None, clock: Clock | None = None
) -> Runtime:
    """The runtime for `settings`. `model` and `clock` replace the configured ones (tests).

    The model SDK (seconds to import) starts loading in the background at once."""
    check_store_backend(settings)  # never half-run on an incomplete [store] backend
    index = await asyncio.to_thread(open_memory_index, settings)
    try:
        model = model or create_model_client(
            settings.agent.model,
            fallbacks=settings.agent.fallback_models,
            api_base=settings.agent.api_base,
            timeout_s=settings.agent.timeout_s,
            max_retries=settings.agent.max_retries,
        )
        clock = clock or Clock(owner_zone(settings.agent.timezone, settings.workspace_dir))
        if not settings.dreaming.enabled:
            stop_recording(index.db)  # no recall signals are kept for a disabled Dreaming
        store: SessionStore = store_for("SessionStore", index.db)
        mcp = McpServers(settings.mcp, stderr_dir=settings.agent_dir / "mcp")
        automations = None
        if settings.automations.enabled:  # the jobs, a scheduler the gateway starts, the tool
            automations = await asyncio.to_thread(build_automations, settings, index.db, clock)
        agent = build_agent(
            model=model,
            store=store,
            index=index,
            workspace=settings.workspace_dir,
            config=settings.agent,
            clock=clock,
            active_memory=True,
            extra_tools=(automations.tool,) if automations is not None else (),
            mcp=mcp,
            projects=project_directory(settings),
            media=(settings.voice, settings.media),
        )
    except BaseException:
        index.close()
        raise
    runtime = Runtime(
        settings=settings,
        index=index,
        store=store,
        model=model,
        agent=agent,
        watcher=MemoryWatcher(index),
        clock=clock,
        automations=automations,
        mcp=mcp,
        _preloading=asyncio.ensure_future(
            _preload_quietly(model, litellm=settings.voice.provider == "litellm")
        ),
    )
    return runtime


def build_agent(
    *,
    model: ModelClient,
    store: SessionStore,
    index: MemoryIndex,
    workspace: Path,
    config: AgentConfig | None = None,
    clock: Clock | None = None,
    fetcher: WebFetcher | None = None,
    extra_tools: Sequence[Tool] = (),
    active_memory: bool = False,
    mcp: McpServers | None = None,
    projects: ProjectDirectory | None = None,
    media: tuple[VoiceConfig, MediaConfig] | None = None,
) -> Agent:
    """An `Agent` and its parts over `index` and `store`: the workspace writer (every write
    re-indexes memory), the standing intents, the memory and `intent` tools, the context
    builder, the compactor and — with `active_memory` — the recall before owner messages.
    `extra_tools` are offered after the built-in ones (each still subject to the turn's policy);
    `mcp`'s servers add their tools and their listing (whoever built it starts and closes it).
    With `media` ([voice] and [media] settings) the agent transcribes voice notes, shows
    images to a model that reads them and reads documents; without, it names their paths.
    The skills in the workspace's skills/ are listed in the owner's prompt.

    `config` defaults to `AgentConfig()`, `clock` to the configured time zone, `fetcher` to a
    real `WebFetcher`. Blocking (opens the intents tables): call it from a worker thread or
    at start-up. Tests and benchmarks build their agents here too."""
    config = config or AgentConfig()
    clock = clock or Clock(owner_zone(config.timezone, workspace))

    def reindex(_rel_path: str) -> None:  # writes run in worker threads, and so does this
        index.sync()

    writer = WorkspaceWriter(workspace, on_written=reindex, tz=clock.tz)
    intents = IntentStore.open(index.db, now=clock.now().timestamp())
    reader = build_media_reader(model, workspace, clock, *media) if media else None
    memory_tools = MemoryTools(
        workspace=workspace,
        index=index,
        store=store,
        writer=writer,
        clock=clock,
        fetcher=fetcher,
        media=reader,
    )
    intent_tool = IntentTool(intents, clock, memory_tools.context_tainted).tool()
    tools = memory_tools.registry(intent_tool, *extra_tools)
    if mcp is not None:
        tools.add_provider(mcp)
    recall = (
        ActiveMemory(
            model=model,
            store=store,
            tools=tools,
            workspace=workspace,
            config=config,
            index=index,
            projects=projects,
        )
        if active_memory
        else None
    )
    return Agent(
        model=model,
        store=store,
        index=index,
        workspace=workspace,
        config=config,
        clock=clock,
        writer=writer,
        intents=intents,
        tools=tools,
        context_builder=ContextBuilder(
            workspace,
            max_chars=config.bootstrap_max_chars,
            total_max_chars=config.bootstrap_total_max_chars,
            sources=(Skills(workspace), *((mcp,) if mcp is not None else ())),
        ),
        compactor=Compactor(model=model, store=store, index=index, tools=tools, config=config),
        recall=recall,
        projects=projects,
        media=reader,
    )


def project_directory(settings: Settings) -> ProjectDirectory:
    """The `[projects.NAME]` tables as the agent reads them (agent/projects.py)."""
    return ProjectDirectory.of(
        {name: (p.chats, p.folders) for name, p in settings.projects.items()}
    )


def build_media_reader(
    model: ModelClient, workspace: Path, clock: Clock, voice: VoiceConfig, media: MediaConfig
) -> MediaReader:
    """What turns received files into text and images (the downscaled copies go to the inbox)."""
    return MediaReader(
        workspace=workspace,
        inbox=Inbox(workspace, tz=clock.tz),
        voice=voice,
        media=media,
        transcriber=create_transcriber(voice),
        vision=lambda: supports_images(model),
    )


async def _preload_quietly(model: ModelClient, *, litellm: bool = False) -> None:
    with contextlib.suppress(Exception):  # the first reply imports it again, and says what failed
        await preload(model)
        if litellm:  # voice notes are transcribed through litellm: not on the first one's time
            await load_litellm()


# -- the gateway (`pinch gateway`, and `pinch chat` with the terminal) ------------------------


def build_channels(settings: Settings, note: Callable[[str], None]) -> dict[str, Channel]:
    """The channels of the registry whose tokens are set; a one-line note for each that is
    skipped. Received files go to the one inbox, dated in the owner's zone."""
    inbox = Inbox(
        settings.workspace_dir, tz=owner_zone(settings.agent.timezone, settings.workspace_dir)
    )
    found: dict[str, Channel] = {}
    for row in CHANNELS:
        if row.adapter is None or row.config_section is None:
            continue  # not run by the gateway (the terminal)
        config = getattr(settings, row.config_section)
        if row.token_variable is None:  # runs when its section is enabled (the web page)
            if not (web_page_wanted(settings) if row.config_section == "web" else config.enabled):
                continue
        elif config.bot_token is None:
            variable = row.token_variable
            if not settings.is_default_agent:  # another agent's tokens are its own variables
                variable = env_prefix(settings.agent_id) + variable.removeprefix("PINCH_")
            note(f"{row.name}: skipped (no token; set {variable} to run it)")
            continue
        try:
            found[row.name] = adapter_class(row)(
                config, inbox=inbox, state_dir=settings.own_dir / "state"
            )
        except Exception as exc:
            note(f"{row.name}: skipped ({type(exc).__name__}: {exc})")
    return found


def options_from(settings: Settings) -> GatewayOptions:
    return GatewayOptions(
        agent_id=settings.agent_id,
        owner_dm_scope=settings.gateway.owner_dm_scope,
        collect_window_s=settings.gateway.collect_window_ms / 1000,
        max_concurrent_turns=settings.gateway.max_concurrent_turns,
        dedup_ttl_s=settings.slack.dedup_ttl_s,
        heartbeat_path=heartbeat_dir(settings) / HEARTBEAT_FILE,
    )


def build_gateway(
    settings: Settings,
    runtime: Runtime,
    channels: Mapping[str, Channel],
    *,
    chat_claimant: str | None = None,
    turn_slots: TurnSlots | None = None,
) -> Gateway:
    """The gateway answering `channels` with `runtime`'s agent (start it with `await
    gateway.start()`). `pinch gateway` passes the platform channels; `pinch chat` passes the
    terminal and its `chat_claimant` (the terminal's instance): that gateway claims only the
    queue rows its terminal wrote, writes no heartbeat file (the heartbeat is `pinch
    gateway`'s), and knows no platform owners (the terminal's user is the owner). `turn_slots`:
    the process's bound on turns at once, shared by every agent it serves."""
    db = runtime.index.db
    if chat_claimant is not None:
        return Gateway(
            runtime=runtime,
            channels=channels,
            store=GatewayStore(store_for("QueueStore", db, claimant=chat_claimant)),
            access=Access(owners={}, channels={}, pairing=Pairing(store_for("PairingStore", db))),
            options=replace(options_from(settings), heartbeat_path=None),
        )
    access = Access(
        owners=Owners.from_settings(settings),
        channels=channel_settings(settings),
        pairing=Pairing(store_for("PairingStore", db)),
    )
    return Gateway(
        runtime=runtime,
        channels=channels,
        store=GatewayStore(store_for("QueueStore", db)),
        access=access,
        options=options_from(settings),
        turn_slots=turn_slots,
    )


def build_web_server(
    settings: Settings,
    runtime: Runtime,
    gateway: Gateway,
    *,
    log_tail: Callable[[int], list[str]] | None = None,
    log_agent: str | None = None,
) -> WebServer | None:
    """The web page (`[web]`) served by `pinch gateway` with `gateway`'s channels and state, or
    None when it is off. Start it after the gateway, stop it after the gateway stopped (the
    web channel's event streams end with the channel)."""
    if not web_page_wanted(settings):
        return None
    from app.web.auth import Logins
    from app.web.context import WebContext
    from app.web.server import WebServer, make_templates

    store = store_for("WebAuthStore", runtime.index.db)
    ctx = WebContext(
        settings=settings,
        runtime=runtime,
        templates=make_templates(),
        services={
            "gateway": gateway,
            "web_channel": gateway.channels.get(WEB),
            "logins": Logins(
                store, settings.web, settings.own_dir, session_cookie=session_cookie(settings)
            ),
            "log_tail": log_tail or (lambda _count: []),
            "log_agent": log_agent,  # the health page's tail keeps only this agent's lines
        },
    )
    return WebServer(ctx)


def session_cookie(settings: Settings) -> str:
    """The web page's login cookie: `pinch_session` for the default agent, one of its own for
    every other (a browser sends a host's cookies to each of its ports)."""
    agent = settings.agent_id
    return "pinch_session" if settings.is_default_agent else f"pinch_session_{agent}"


def build_agent_leases(settings: Settings) -> tuple[AgentLeaseStore, Callable[[], None]]:
    """The lease of `settings`' agent (which gateway process serves it) on the configured
    backend, and how to close what was opened for it: a small connection of its own to the
    agent's database (its SQLite file, or its PostgreSQL schema)."""
    if settings.store.backend == "postgres":
        from app.store_factory import open_postgres_store
        from memory.store.postgres.agent_leases import PgAgentLeaseStore

        pg = open_postgres_store(settings)
        return PgAgentLeaseStore(pg), pg.close
    db = open_database(settings.database_path, vector_backend="numpy")
    try:
        return SqliteAgentLeaseStore(db), db.close
    except BaseException:
        db.close()
        raise


def web_exposure_problem(settings: Settings) -> str | None:
    """Advice when the web page must not start as configured (a non-loopback host without a
    password), else None."""
    from app.web.auth import exposure_problem

    return exposure_problem(settings.web, settings.own_dir)


def build_health_server(settings: Settings, gateway: Gateway) -> HealthServer | None:
    """`GET /healthz` over `gateway`'s channel health, when `[gateway] health_port` is set
    (start it after the gateway, stop it after)."""
    if settings.gateway.health_port is None:
        return None
    return HealthServer(
        lambda: gateway.health, settings.gateway.health_listen, settings.gateway.health_port
    )
