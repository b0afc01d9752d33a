"""A fake web site on 127.0.0.1 for web_fetch: fixed pages by path (GET only)."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.local_server import LocalHTTPServer


class PageServer(LocalHTTPServer):
    """Serves `pages` (path → HTML text) as text/html; anything else is a 404."""

    def __init__(self, pages: dict[str, str]) -> None:
        self.pages = dict(pages)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = server.pages.get(self.path)
                data = (body or "not found").encode("utf-8")
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
