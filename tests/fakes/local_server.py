"""The common part of the fake servers: an HTTP server on 127.0.0.1 (a free port) answering from
a daemon thread, usable as a context manager."""

from __future__ import annotations

import logging
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

log = logging.getLogger("tests.fakes")


class _QuietHTTPServer(ThreadingHTTPServer):
    """socketserver prints a handler's exception to sys.stderr — in a test that runs a command
    in-process (click's runner), into the command's own captured stderr. A client that closed
    its connection (a pool dropping an idle one) is no error of the server's: not shown; other
    errors go to the log, where a failing test still shows them."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionResetError | BrokenPipeError):
            return
        log.exception("fake server: a request from %s failed", client_address)


class LocalHTTPServer:
    def __init__(self, handler_class: type[BaseHTTPRequestHandler]) -> None:
        self._httpd = _QuietHTTPServer(("127.0.0.1", 0), handler_class)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
