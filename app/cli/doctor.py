"""`pinch doctor`: is this installation able to work? One result per check, never a secret.

Checks run in order: secrets present for what is configured, file modes, database integrity
(`PRAGMA quick_check`), index state, the model answering a 1-token request (skipped with
`--offline`), then any extra checks — the gateway adds one per channel (getMe / auth.test).

A check is any callable taking the settings and returning a `CheckResult` (or an awaitable of
one). Channel checks plug in two ways: pass them as `run_checks(settings, extra_checks=[...])`,
and `pinch doctor` adds one per configured channel (`app.cli.channel_checks`). A check that raises
is reported as a failed check.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import shlex
import shutil
import stat
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from app.channel_registry import channel_settings
from app.cli.checks import Check, CheckResult, channel_check
from app.cli.mcp_commands import check_skills, mcp_checks

if TYPE_CHECKING:
    from app.config import Settings

__all__ = ["Check", "CheckResult", "channel_check", "run_checks"]

MODEL_CHECK_TIMEOUT_S = 10.0


# ---- the built-in checks -------------------------------------------------------------------


def _model_key_names(model: str) -> list[str]:
    """The environment variables a model's provider needs (empty: none, or not known here)."""
    if model.startswith(("claude-", "anthropic/")):
        return ["ANTHROPIC_API_KEY"]
    provider = model.split("/", 1)[0] if "/" in model else ""
    known = {
        "openai": "OPENAI_API_KEY",
        "gemini": "GEMINI_API_KEY",
        "mistral": "MISTRAL_API_KEY",
        "groq": "GROQ_API_KEY",
        "openrouter": "OPENROUTER_API_KEY",
        "deepseek": "DEEPSEEK_API_KEY",
    }
    return [known[provider]] if provider in known else []


def check_secrets(settings: Settings) -> CheckResult:
    """Each secret the configuration needs is set (values are never shown)."""
    needed: dict[str, bool] = {}
    for model in [settings.agent.model, *settings.agent.fallback_models]:
        for name in _model_key_names(model):
            needed[name] = bool(os.environ.get(name))
    for channel in channel_settings(settings).values():  # each channel says what it needs
        needed.update(channel.needed_secrets())
    if not settings.is_default_agent:  # another agent's channel secrets are its own variables
        from app.config_layers import env_prefix

        own = env_prefix(settings.agent_id)
        needed = {own + n[6:] if n.startswith("PINCH_") else n: v for n, v in needed.items()}
    if not needed:
        return CheckResult("secrets", True, "none needed by this configuration")
    missing = [name for name, present in needed.items() if not present]
    detail = ", ".join(f"{name} {'set' if ok else 'missing'}" for name, ok in needed.items())
    if missing:
        detail += f" — export {' and '.join(missing)}"
    return CheckResult("secrets", not missing, detail)


def check_file_modes(settings: Settings) -> CheckResult:
    """The home, the workspace (which may lie outside it) and the database are private."""
    loose = []
    for path in dict.fromkeys((settings.home, settings.workspace_dir, settings.database_path)):
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            continue
        if mode & 0o077:
            loose.append(f"{path} is {stat.filemode(mode)}")
    if loose:
        return CheckResult(
            "file modes", False, "; ".join(loose) + " — run `pinch init` to make them private"
        )
    return CheckResult("file modes", True, "home, workspace and database are private (0700 / 0600)")


def check_database(settings: Settings) -> CheckResult:
    """`PRAGMA quick_check` on a read-only connection (the check changes nothing)."""
    from memory.store.db import corruption_advice, quick_check_read_only

    if settings.store.backend == "postgres":
        from app.store_factory import open_postgres_store

        started = time.monotonic()
        db = open_postgres_store(settings)  # reachable and migrated, else advice
        db.close()
        took = time.monotonic() - started
        return CheckResult(
            "database", True, f"PostgreSQL {db.server_version}, schema {db.schema} ({took:.2f} s)"
        )
    path = settings.database_path
    if not path.exists():
        return CheckResult("database", False, f"{path} does not exist: run `pinch init`")
    started = time.monotonic()
    problems = quick_check_read_only(path)
    if problems:
        return CheckResult("database", False, corruption_advice(path, problems[0]))
    return CheckResult(
        "database", True, f"{path}: quick_check ok ({time.monotonic() - started:.2f} s)"
    )


def check_index(settings: Settings) -> CheckResult:
    """Which model and vector backend the index uses, whether it is degraded or has problems."""
    from app.store_factory import open_memory_index

    if not settings.workspace_dir.is_dir():
        return CheckResult(
            "index", False, f"no workspace at {settings.workspace_dir}: run `pinch init`"
        )
    idx = open_memory_index(settings)
    try:
        st = idx.status()
    finally:
        idx.close()
    embed = f"{st.provider} {st.model}".strip() if st.dimensions else st.provider
    detail = f"{st.files} files, {st.chunks} chunks; {embed}; vector search {st.vector_backend}"
    if st.degraded:
        detail += f"; degraded: {st.degraded}"
    if st.pending_rebuild or st.generation is None:
        return CheckResult("index", False, detail + " — run `pinch memory index`")
    if st.problems:
        first = next(iter(st.problems))
        return CheckResult(
            "index",
            False,
            f"{detail}; {len(st.problems)} file(s) with problems (first: {first}) — see "
            "`pinch memory status`",
        )
    return CheckResult("index", True, detail)


async def check_model(settings: Settings) -> CheckResult:
    """The configured model answers a 1-token request within a short timeout."""
    from agent.model.errors import ModelError
    from agent.model.factory import create_model_client
    from agent.types import Message, ModelRequest

    cfg = settings.agent
    timeout = min(MODEL_CHECK_TIMEOUT_S, cfg.timeout_s)
    client = create_model_client(cfg.model, api_base=cfg.api_base, timeout_s=timeout, max_retries=0)
    request = ModelRequest(messages=(Message.user("ping"),), max_tokens=1, cache_prefix=False)
    started = time.monotonic()
    try:
        await asyncio.wait_for(client.complete(request), timeout + 2)
    except ModelError as exc:
        return CheckResult("model", False, f"{cfg.model}: {exc}")
    except TimeoutError:
        return CheckResult("model", False, f"{cfg.model}: no answer within {timeout:.0f} s")
    finally:
        close = getattr(client, "aclose", None)
        if close is not None:
            await close()
    return CheckResult("model", True, f"{cfg.model} answered in {time.monotonic() - started:.1f} s")


def check_voice(settings: Settings) -> CheckResult:
    """`[voice]` can transcribe: the command exists, or the provider's key is set (never its
    value). Offered only when a provider is configured."""
    voice = settings.voice
    if voice.provider == "command":
        argv = shlex.split(voice.command or "")
        program = os.path.expanduser(argv[0]) if argv else ""
        found = shutil.which(program) if program else None
        if found is None:
            return CheckResult("voice", False, f"command {program!r} not found or not executable")
        return CheckResult("voice", True, f"command {found}")
    if voice.provider == "litellm":
        model = voice.model if "/" in voice.model else f"openai/{voice.model}"
        names = [] if voice.api_base else _model_key_names(model)
        missing = [n for n in names if not os.environ.get(n)]
        if missing:
            return CheckResult("voice", False, f"{voice.model}: export {' and '.join(missing)}")
        where = f" at {voice.api_base}" if voice.api_base else ""
        return CheckResult("voice", True, f"litellm {voice.model}{where}")
    return CheckResult("voice", True, "voice notes are saved, not transcribed (provider none)")


def builtin_checks(*, offline: bool = False) -> list[Check]:
    checks: list[Check] = [check_secrets, check_file_modes, check_database, check_index]
    if not offline:
        checks.append(check_model)
    return checks


def optional_checks(settings: Settings) -> list[Check]:
    """Checks of what is configured only sometimes: `[voice]` when a provider is set, the
    skills folder when there is one, one per configured MCP server (started and stopped
    again). The channels' own checks are added by their callers (`pinch doctor`, /health)."""
    voice: list[Check] = [check_voice] if settings.voice.provider != "none" else []
    skills: list[Check] = [check_skills] if (settings.workspace_dir / "skills").is_dir() else []
    from app.agents import agent_names

    several = len(agent_names(settings.home)) > 1
    shared: list[Check] = [check_workspace] if several else []  # one agent shares nothing
    return [*voice, *skills, *shared, *mcp_checks(settings)]


def check_workspace(settings: Settings) -> CheckResult:
    """The agent's memory folder is its own: no other agent's workspace is, holds or lies in it
    (a `workspace = ...` edited into an agent's config.toml can make them meet)."""
    from app.agents import workspace_clash
    from app.config_layers import agent_file

    clash = workspace_clash(settings.home, settings.workspace_dir, besides=settings.agent_id)
    if clash is None:
        return CheckResult("workspace", True, f"{settings.workspace_dir}, no other agent's")
    where = (
        settings.config_path
        if settings.is_default_agent
        else agent_file(settings.home, settings.agent_id)
    )
    return CheckResult(
        "workspace",
        False,
        f"{clash}: the two agents share memory files. Set `workspace` in {where} to a folder "
        "of this agent's own.",
    )


# ---- running them ---------------------------------------------------------------------------


def _name_of(check: Check) -> str:
    name = getattr(check, "name", None) or getattr(check, "__name__", "check")
    return str(name).removeprefix("check_").replace("_", " ")


async def _run_one(check: Check, settings: Settings) -> CheckResult:
    try:
        result = check(settings)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, CheckResult):
            raise TypeError(f"returned {type(result).__name__}, not a CheckResult")
        return result
    except Exception as exc:  # one broken check must not hide the others' results
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return CheckResult(_name_of(check), False, reason)


async def run_checks_async(
    settings: Settings, extra_checks: Iterable[Check] = (), *, offline: bool = False
) -> list[CheckResult]:
    results = []
    for check in [*builtin_checks(offline=offline), *optional_checks(settings), *extra_checks]:
        results.append(await _run_one(check, settings))
    return results


def run_checks(
    settings: Settings, extra_checks: Iterable[Check] = (), *, offline: bool = False
) -> list[CheckResult]:
    """Every built-in check, then `extra_checks`, in order; never raises for a failed check."""
    return asyncio.run(run_checks_async(settings, extra_checks, offline=offline))


# ---- --health -------------------------------------------------------------------------------


def gateway_health(settings: Settings, *, timeout_s: float = 3.0) -> str | None:
    """Why the gateway is unhealthy, or None: the health endpoint if `[gateway] health_port`
    is set, else the heartbeat file. Fast (no database, no model) for a container HEALTHCHECK."""
    from app.gateway.heartbeat import health_problem, heartbeat_dir, read_heartbeat

    port = settings.gateway.health_port
    if port is None:
        return health_problem(read_heartbeat(heartbeat_dir(settings)))
    import urllib.error
    import urllib.request

    host = settings.gateway.health_listen
    host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    url = f"http://{host}:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return None if response.status == 200 else f"{url} answered {response.status}"
    except urllib.error.HTTPError as exc:
        return f"{url} answered {exc.code}"
    except OSError as exc:
        reason = getattr(exc, "reason", None) or exc
        return f"the gateway's health endpoint {url} is unreachable ({reason})"
