"""For the MCP tests: the small SDK servers of tests/fakes/mcp_servers.py as configured servers
(stdio, or streamable HTTP in a child process), an event loop in a thread (a set of servers
lives in one loop and serves several tests), and whether a process is alive (/proc)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
SERVERS = ROOT / "tests" / "fakes" / "mcp_servers.py"
T = TypeVar("T")


def stdio(kind: str, **settings: Any) -> dict[str, Any]:
    """`[mcp.servers.X]` for the test server `kind` over stdio."""
    return {"command": sys.executable, "args": [str(SERVERS), kind], **settings}


class LoopThread:
    """An asyncio loop in a daemon thread: `run(coro)` from the test's thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def http_server(kind: str) -> Iterator[str]:
    """The test server `kind` over streamable HTTP on 127.0.0.1; yields its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVERS), kind, "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise AssertionError("the HTTP MCP server did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (Linux /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_until(condition: Any, timeout: float = 20, what: str = "a condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # another process: polling is the only way to watch it
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
