"""/dreams: the dream diary (DREAMS.md), the last dreams, a dry run, run now, and undo — the same
operations as `pinch memory dream [--dry-run] [--phase] [--undo]`, over the running process's
database and model.

    GET  /dreams           diary, last runs, schedule, what undo would restore
    POST /dreams/dry-run   what would be promoted and why not (phase light|rem|deep); writes nothing
    POST /dreams/run       dream now (needs [dreaming] enabled and the model)
    POST /dreams/undo      restore MEMORY.md from before the last dream (refused if edited since)
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from agent.dream_run import DISABLED_NOTE, DreamReport, Phase, dream
from agent.model.errors import ModelError
from agent.model.factory import check_key
from app.web.context import WebContext
from app.web.page_support import done, notice_of, owner_time
from memory.errors import WorkspaceError
from memory.files.atomic import read_workspace_text
from memory.files.workspace import DREAMS_FILE
from memory.lifecycle.dreaming import DreamBusyError, last_runs, plan_undo, undo_last

PHASES: tuple[Phase, ...] = ("light", "rem", "deep")
DIARY_CHARS = 200_000  # the newest part of a long diary


def add_routes(app: web.Application, ctx: WebContext) -> None:
    pages = DreamPages(ctx)
    app.router.add_get("/dreams", pages.index)
    app.router.add_post("/dreams/dry-run", pages.dry_run)
    app.router.add_post("/dreams/run", pages.run)
    app.router.add_post("/dreams/undo", pages.undo)


class DreamPages:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    async def _page(
        self, request: web.Request, *, report: DreamReport | None = None, status: int = 200
    ) -> web.Response:
        runtime, settings = self.ctx.runtime, self.ctx.settings
        workspace = settings.workspace_dir
        db = runtime.index.db
        diary, runs = await asyncio.gather(
            asyncio.to_thread(_diary, workspace), asyncio.to_thread(last_runs, db, 10)
        )
        try:
            undo: Any = await asyncio.to_thread(plan_undo, db, workspace)
            no_undo = None
        except WorkspaceError as exc:
            undo, no_undo = None, str(exc)
        d = settings.dreaming
        schedule = (
            f"nightly at {d.hour:02d}:{d.minute:02d} {runtime.clock.zone_name} while "
            "`pinch gateway` runs"
            if d.enabled
            else "off ([dreaming] enabled = false); undo still works"
        )
        return await self.ctx.render(
            request,
            "pages/dreams.html",
            status=status,
            diary=diary,
            runs=runs,
            undo=undo,
            no_undo=no_undo,
            enabled=d.enabled,
            schedule=schedule,
            phases=PHASES,
            report=report,
            notice=notice_of(self.ctx, request),
            when=lambda ts: owner_time(self.ctx, ts),
        )

    async def index(self, request: web.Request) -> web.Response:
        return await self._page(request)

    async def dry_run(self, request: web.Request) -> web.Response:
        form = await request.post()
        phase = str(form.get("phase", "deep"))
        if phase not in PHASES:
            phase = "deep"
        report = await self._dream(phase, dry_run=True)  # type: ignore[arg-type]
        return await self._page(request, report=report)

    async def run(self, request: web.Request) -> web.StreamResponse:
        if not self.ctx.settings.dreaming.enabled:
            raise done(
                self.ctx,
                "/dreams",
                "Dreaming is disabled ([dreaming] enabled = false), so nothing was done. Set "
                f"enabled = true under [dreaming] in {self.ctx.settings.config_path} to dream.",
                ok=False,
            )
        try:
            report = await self._dream("deep", dry_run=False)
        except ModelError as exc:
            raise done(
                self.ctx,
                "/dreams",
                f"Dreaming needs the model, and it cannot be used: {exc}. Nothing was written. "
                "A dry run shows what would be promoted without a model.",
                ok=False,
            ) from None
        except DreamBusyError as exc:
            raise done(self.ctx, "/dreams", str(exc), ok=False) from None
        except WorkspaceError as exc:
            raise done(self.ctx, "/dreams", str(exc), ok=False) from None
        raise done(self.ctx, "/dreams", f"Dreamed: {report.outcome()}.")

    async def undo(self, request: web.Request) -> web.StreamResponse:
        runtime = self.ctx.runtime
        try:
            line = await asyncio.to_thread(
                undo_last, runtime.index.db, self.ctx.settings.workspace_dir
            )
        except WorkspaceError as exc:
            raise done(self.ctx, "/dreams", str(exc), ok=False) from None
        await asyncio.to_thread(runtime.index.sync)  # the restored MEMORY.md is searchable now
        raise done(self.ctx, "/dreams", line)

    async def _dream(self, phase: Phase, *, dry_run: bool) -> DreamReport:
        """One dream over the running process's database (what `dream_once` does over a
        database it opens itself); the model only for a deep run that writes."""
        settings, runtime = self.ctx.settings, self.ctx.runtime
        if not settings.dreaming.enabled:
            return DreamReport(phase, dry_run, ran=False, note=DISABLED_NOTE)
        model = runtime.model if phase == "deep" and not dry_run else None
        if model is not None:
            await check_key(model)
        report = await dream(
            runtime.index.db,
            settings.workspace_dir,
            model,
            settings.dreaming,
            budget_chars=settings.agent.bootstrap_max_chars,
            phase=phase,
            dry_run=dry_run,
        )
        if report.write is not None:
            await asyncio.to_thread(runtime.index.sync)
        return report


def _diary(workspace: Any) -> str:
    try:
        text = read_workspace_text(workspace, DREAMS_FILE) or ""
    except WorkspaceError as exc:
        return f"(DREAMS.md cannot be shown: {exc})"
    return text if len(text) <= DIARY_CHARS else "…\n" + text[-DIARY_CHARS:]
