"""One MCP server, supervised: started with the process (or on first use when `lazy`), its tool
list read once connected, each call bounded by `timeout_s`, restarted with backoff when it fails
to start, crashes, hangs or answers garbage, and stopped with the process (its process tree is
ended by the SDK's stdio transport; no orphans).

Every failure is one line in the log and one `ServerUnavailable` for the caller ("tool
unavailable: …"); nothing here raises into a turn otherwise. The connection lives in its own
task (the SDK's transports are async context managers that must be left in the task that
entered them); calls from turns are requests over that connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

from pydantic import ValidationError

from agent.mcp.mcp_config import McpServerConfig, MissingVariable, expand, references
from agent.mcp.stderr_log import open_stderr_log
from common.printable import printable
from common.redact import redact
from common.text import shorten

if TYPE_CHECKING:  # the SDK takes most of a second to import: only when a server starts
    import mcp_types
    from mcp import ClientSession

log = logging.getLogger(__name__)

State = Literal["disabled", "idle", "starting", "ready", "failed", "stopped"]
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0
STABLE_S = 60.0  # a server that stayed up this long starts its backoff again from the first step
START_TIMEOUT_S = 30.0  # the handshake may take longer than a call (npx fetching a package)
STOP_WAIT_S = 8.0  # the SDK ends a stdio server in ≤ 6 s (stdin closed, SIGTERM, SIGKILL)
STDERR_DRAIN_S = 1.0  # how long a failed start waits for its stderr to be copied
WATCH_S = 2.0  # how often a ready stdio server's process is checked
MAX_GARBAGE_LOGGED = 5  # lines of stdout that are not JSON-RPC logged per start of a server
CONNECTION_CLOSED, REQUEST_TIMEOUT = -32000, -32001  # the SDK's error codes (mcp_types)


class ServerUnavailable(Exception):
    """The server cannot answer now; the message is the line the model reads."""


class ToolCallError(Exception):
    """The server answered the call with an error (bad arguments, unknown tool, its own
    failure): the server is fine, the model should correct itself."""


@dataclass(frozen=True)
class ServerStatus:
    """What `pinch mcp list` and `pinch doctor` show of one server."""

    name: str
    transport: str
    state: State
    tools: tuple[str, ...]
    last_error: str | None
    restarts: int
    pid: int | None


class McpConnection:
    """One configured MCP server and its supervised connection."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        *,
        stderr_path: Path | None = None,
        first_backoff_s: float = FIRST_BACKOFF_S,
        max_backoff_s: float = MAX_BACKOFF_S,
    ) -> None:
        self.name = name
        self.config = config
        self.stderr_path = stderr_path
        self.first_backoff_s = first_backoff_s
        self.max_backoff_s = max_backoff_s
        self.state: State = "disabled" if not config.enabled else "idle"
        self.tools: tuple[mcp_types.Tool, ...] = ()
        self.tools_version = 0  # grows whenever `tools` is replaced
        self.last_error: str | None = None
        self.restarts = 0
        self.pid: int | None = None
        self._session: ClientSession | None = None
        self._wanted = asyncio.Event()  # start (at once, or on first use when lazy)
        self._broken = asyncio.Event()  # the current connection must be dropped
        self._settled = asyncio.Event()  # ready or failed: an attempt finished
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._broken_reason = ""
        self._garbage_lines = 0  # lines of stdout that were not JSON-RPC, since the start
        self._stderr_copier: threading.Thread | None = None
        self.on_change: Callable[[], None] | None = None  # told when state or tools change

    # -- life --------------------------------------------------------------------------------

    def start(self) -> None:
        """Start supervising (connect now, or on first use when `lazy`). Never blocks."""
        if not self.config.enabled or self._task is not None:
            return
        if not self.config.lazy:
            self._wanted.set()
        self._task = asyncio.ensure_future(self._supervise())

    async def wait_settled(self, timeout: float) -> None:
        """Wait (≤ `timeout` s) until the first attempt to connect has succeeded or failed."""
        if self._task is None or not self._wanted.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._settled.wait(), timeout)

    async def ensure_started(self) -> None:
        """Start a lazy server now and wait (≤ `timeout_s`) until it is ready or has failed."""
        if self._task is None or self._wanted.is_set():
            return
        self._wanted.set()
        await self.wait_settled(self.config.timeout_s)

    async def aclose(self) -> None:
        """Stop the server (its process ends) and the supervision; safe to call twice."""
        self._closing = True
        self._broken.set()
        self._wanted.set()
        task, self._task = self._task, None
        if task is not None and self.state == "starting":
            # Still in the handshake, which `_broken` does not interrupt: waiting STOP_WAIT_S
            # for a server that never answers would only delay the exit (the process still
            # ends: leaving the transport stops it).
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        elif task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), STOP_WAIT_S)
            except (TimeoutError, Exception):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if self.state != "disabled":
            self.state = "stopped"
            self._changed()

    def status(self) -> ServerStatus:
        return ServerStatus(
            self.name,
            self.config.transport,
            self.state,
            tuple(t.name for t in self.tools),
            self.last_error,
            self.restarts,
            self.pid,
        )

    # -- calls -------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> mcp_types.CallToolResult:
        """Run the server's tool `tool`; ServerUnavailable when the server cannot answer (it is
        then restarted), ToolCallError when it answers with a protocol error."""
        from mcp.shared.exceptions import MCPError

        session = await self._ready_session()
        timeout = self.config.timeout_s
        try:
            async with asyncio.timeout(timeout + 2):  # the SDK's own timeout comes first
                return await session.call_tool(tool, dict(arguments), read_timeout_seconds=timeout)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise self._drop(f"no answer within {timeout:g} s") from None
            if exc.code == CONNECTION_CLOSED:
                raise self._drop("the connection closed (the server stopped or crashed)") from None
            raise ToolCallError(
                f"{self.name} refused the call: {shorten(self._redact(exc.message), 300)}"
            ) from None
        except TimeoutError:
            raise self._drop(f"no answer within {timeout:g} s") from None
        except Exception as exc:  # a transport failure, an answer the SDK could not read
            raise self._drop(_describe(exc)) from None

    async def _ready_session(self) -> ClientSession:
        if not self.config.enabled:
            raise ServerUnavailable(f"tool unavailable: MCP server {self.name} is disabled")
        if self._task is None:
            raise ServerUnavailable(f"tool unavailable: MCP server {self.name} is not running")
        await self.ensure_started()  # lazy: the first use starts it
        session = self._session
        if self.state != "ready" or session is None:
            why = f" ({self.last_error})" if self.last_error else ""
            raise ServerUnavailable(
                f"tool unavailable: MCP server {self.name} is {self.state}{why}; it is restarted "
                "automatically, try again later or do without it"
            )
        return session

    def _drop(self, reason: str) -> ServerUnavailable:
        """Mark the connection broken (the supervisor restarts it) and say so."""
        reason = shorten(self._redact(reason), 200)
        if self.state == "ready":
            self._broken_reason = reason
            self._broken.set()
        return ServerUnavailable(
            f"tool unavailable: MCP server {self.name}: {reason}; it is being restarted"
        )

    # -- supervision -------------------------------------------------------------------------

    async def _supervise(self) -> None:
        delay = self.first_backoff_s
        await self._wanted.wait()
        while not self._closing:
            started = time.monotonic()
            self.state = "starting"
            try:
                await self._serve_once()
                reason = self._broken_reason or "the connection ended"
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # an exception group from the SDK's task groups too
                reason = _describe(exc)
                if self.state == "starting":  # it never got going: its own words say why
                    if self.pid is not None and not _running(self.pid):
                        reason = "it exited during start-up"
                    reason += self._stderr_tail()
            finally:
                self._session = None
                self.pid = None
            if self._closing:
                break
            if time.monotonic() - started > STABLE_S:
                delay = self.first_backoff_s
            self._fail(reason, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wait_closing(), delay)
            delay = min(delay * 2, self.max_backoff_s)
            self.restarts += 1

    async def _wait_closing(self) -> None:
        while not self._closing:
            self._broken.clear()
            await self._broken.wait()

    def _fail(self, reason: str, retry_in: float) -> None:
        """One line in the log (a failure repeated word for word is logged at debug level)."""
        reason = shorten(self._redact(reason), 300)
        repeated = self.state == "starting" and reason == self.last_error
        self.state = "failed"
        self.last_error = reason
        self._settled.set()
        self._changed()
        log.log(
            logging.DEBUG if repeated else logging.WARNING,
            "MCP server %s unavailable: %s (retrying in %g s)",
            self.name,
            reason,
            retry_in,
        )

    async def _serve_once(self) -> None:
        from mcp import ClientSession

        self._broken.clear()
        self._broken_reason = ""
        self._garbage_lines = 0
        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport(stack))
            session = await stack.enter_async_context(
                ClientSession(read, write, message_handler=self._on_message)
            )
            async with asyncio.timeout(max(self.config.timeout_s, START_TIMEOUT_S)):
                await session.initialize()
                tools = await _list_tools(session)
            self.tools = tuple(t for t in tools if self.config.offers(t.name))
            self.tools_version += 1
            self._session = session
            self.state = "ready"
            self.last_error = None
            self._settled.set()
            self._changed()
            log.info("MCP server %s ready: %d tool(s)", self.name, len(self.tools))
            while not self._broken.is_set():  # a stdio server that exits while idle is noticed
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._broken.wait(), WATCH_S)
                if self.pid is not None and not _running(self.pid):
                    self._broken_reason = "the server's process exited"
                    break

    def _transport(self, stack: AsyncExitStack) -> Any:
        from mcp import StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        config = self.config
        try:
            if config.command is not None:
                env = {k: expand(v) for k, v in config.env.items()}
                params = StdioServerParameters(command=config.command, args=config.args, env=env)
                return _PidRecorder(self, stdio_client(params, errlog=self._errlog(stack)))
            headers = {k: expand(v) for k, v in config.headers.items()}
            client = create_mcp_http_client(headers=headers)
            assert config.url is not None
            return streamable_http_client(config.url, http_client=client)
        except MissingVariable as exc:
            raise _StartError(str(exc)) from None

    def _errlog(self, stack: AsyncExitStack) -> TextIO:
        """Where the server's stderr goes: its own file (0600, bounded: agent/mcp/stderr_log.py),
        or nowhere."""
        if self.stderr_path is None:
            return stack.enter_context(open(os.devnull, "w", encoding="utf-8"))
        errlog, self._stderr_copier = open_stderr_log(self.stderr_path)
        return stack.enter_context(errlog)

    def _redact(self, text: str) -> str:
        """`text` without a secret — the environment's (common/redact.py) and the values this
        server's `env` and `headers` name as `${VAR}` — or an escape sequence: a server that
        fails may echo its own token (on stderr, in an error), and its errors reach the log,
        `pinch mcp list` and the model."""
        named = [v for value in (*self.config.env.values(), *self.config.headers.values())
                 for v in references(value)]  # fmt: skip
        return printable(redact(text, [os.environ.get(name) for name in named]))

    def _changed(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:  # a status file that cannot be written changes nothing here
                log.debug("MCP status not recorded", exc_info=True)

    def _stderr_tail(self) -> str:
        """The last line the server wrote to stderr, as "; stderr: …" (or "")."""
        if self.stderr_path is None:
            return ""
        if self._stderr_copier is not None:  # what the server wrote before it exited
            self._stderr_copier.join(STDERR_DRAIN_S)
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
                lines = f.read().decode("utf-8", errors="replace").splitlines()
        except OSError:
            return ""
        last = next((line.strip() for line in reversed(lines) if line.strip()), "")
        return f"; stderr: {shorten(last, 200)}" if last else ""

    async def _on_message(self, message: object) -> None:
        if isinstance(message, ValidationError):  # a line that is not JSON-RPC: noted, ignored
            self._garbage_lines += 1  # counted per start: a chatty server cannot flood the log
            if self._garbage_lines > MAX_GARBAGE_LOGGED:
                return
            bad = next((e.get("input") for e in message.errors()), "")
            last = " (the last one logged until it restarts)"
            log.warning(
                "MCP server %s wrote a line that is not JSON-RPC (ignored)%s: %s",
                self.name,
                last if self._garbage_lines == MAX_GARBAGE_LOGGED else "",
                shorten(self._redact(repr(bad)), 120),
            )
        elif isinstance(message, Exception):
            log.warning("MCP server %s: %s", self.name, self._redact(_describe(message)))


class _StartError(Exception):
    pass


class _PidRecorder:
    """Wraps the stdio transport to learn the child's pid (for `pinch mcp list` and tests)."""

    def __init__(self, owner: McpConnection, inner: Any) -> None:
        self.owner = owner
        self.inner = inner

    async def __aenter__(self) -> Any:
        before = _children()
        streams = await self.inner.__aenter__()
        args = self.owner.config.args  # servers started at the same time: match the arguments
        new = [p for p in _children() - before if not args or _cmdline(p)[-len(args) :] == args]
        self.owner.pid = min(new) if new else None
        return streams

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.inner.__aexit__(*exc)


def _children() -> set[int]:
    """This process's direct children, of any of its threads (Linux /proc), to learn the pid
    of a server just started."""
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{os.getpid()}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{os.getpid()}/task/{task}/children", encoding="ascii") as f:
                found.update(int(p) for p in f.read().split())
        except OSError:
            continue
    return found


def _running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (Linux /proc; elsewhere: assumed)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        return True


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [part.decode(errors="replace") for part in f.read().split(b"\0") if part]
    except OSError:
        return []


async def _list_tools(session: ClientSession) -> list[mcp_types.Tool]:
    import mcp_types

    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(50):  # a server that pages forever is cut off
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _describe(exc: BaseException) -> str:
    """One line for a failure, even an exception group of the SDK's task groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, _StartError | MissingVariable):
        return str(exc)
    if isinstance(exc, FileNotFoundError):
        return f"cannot start: {exc.filename or exc} not found"
    if isinstance(exc, TimeoutError):
        return "no answer to the start-up handshake in time"
    if isinstance(exc, ValidationError):  # an answer the SDK could not read as MCP
        errors = exc.errors()
        if not errors:
            return "it answered something that is not MCP"
        where = ".".join(str(p) for p in errors[0]["loc"]) or "answer"
        return f"it answered something that is not MCP ({where}: {errors[0]['msg']})"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
