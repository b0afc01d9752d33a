"""Serving the web page's six pages (/memory, /dreams, /sessions, /access, /automations, /health)
in a test: a real `Runtime` from the composition root over a Pinch home in tmp_path, the pages'
own `add_routes`, the packaged templates (autoescaped, the `markdown` filter), on an aiohttp
`TestServer` at 127.0.0.1, driven by aiohttp's `TestClient`.

    async with serve_pages(settings) as page:
        response = await page.client.get("/memory")
        page.runtime.index.search(...)

The login, Host, Origin and CSRF checks are the server's middleware (tests/web_support.py drives
the whole server); these tests drive the handlers' behaviour and their effect on the stores.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from app.cli.main import TEMPLATE_DIR
from app.cli.setup import initialise
from app.config import Settings
from app.process import Runtime
from app.web.context import WebContext
from app.web.server import NAV, PAGE_MODULES, make_templates
from app.wiring import build_runtime

T = TypeVar("T")


def page_settings(home: Path, **changes: Any) -> Settings:
    """Settings for a Pinch home in a test: keyword-only memory, the scripted model's name."""
    values: dict[str, Any] = {
        "home": home,
        "agent": {"model": "claude-test", "max_retries": 0, "timezone": "Europe/Berlin"},
        "memory": {"embedding": {"provider": "none"}, "watch_debounce_ms": 200},
    }
    values.update(changes)
    return Settings(**values)


@dataclass
class ServedPages:
    client: TestClient
    runtime: Runtime
    ctx: WebContext

    async def text(self, path: str, status: int = 200) -> str:
        response = await self.client.get(path)
        body = await response.text()
        assert response.status == status, (response.status, body[:2000])
        return body

    async def post(self, path: str, data: dict[str, Any], status: int = 200) -> tuple[str, str]:
        """POST a form (following the redirect); (the final path with query, the page)."""
        response = await self.client.post(path, data=data)
        body = await response.text()
        assert response.status == status, (response.status, body[:2000])
        return response.url.path_qs, body


@contextlib.asynccontextmanager
async def serve_pages(
    settings: Settings, *, services: dict[str, Any] | None = None, start: bool = True
) -> AsyncIterator[ServedPages]:
    """The six pages over a fresh runtime of `settings` (initialised as `pinch init` does);
    with `start`, the index synced and the watcher running, as in `pinch gateway`."""
    if not settings.workspace_dir.exists():
        initialise(settings, TEMPLATE_DIR)
    runtime = await build_runtime(settings)
    try:
        if start:
            await runtime.start()
        ctx = WebContext(settings, runtime, make_templates(), services=dict(services or {}))
        ctx.globals["nav"] = NAV
        app = web.Application()
        for module in PAGE_MODULES:
            module.add_routes(app, ctx)
        client = TestClient(TestServer(app, host="127.0.0.1"))
        await client.start_server()
        try:
            yield ServedPages(client, runtime, ctx)
        finally:
            await client.close()
    finally:
        await runtime.aclose()


def visible_text(html: str) -> str:
    """The page's text without tags (entities left as they are)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def run_async(scenario: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(scenario)`, in a thread of its own when this thread already runs an event
    loop (Playwright's sync API keeps one running while the session's browser is open)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(scenario)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, scenario).result()
