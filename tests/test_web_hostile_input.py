"""The web page against hostile input, each against a real `pinch gateway` serving the page:
stored text made to be slow to render. It may not stall the gateway."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from app.web.render import MAX_MARKDOWN_CHARS, markdown_html
from tests import web_support
from tests.web_support import WebRig

web_rig = web_support.web_rig  # the module's gateway (a pytest fixture)


def client(rig: WebRig) -> httpx.Client:
    return httpx.Client(base_url=rig.base, follow_redirects=False, timeout=120)


@pytest.fixture
def logged_in(web_rig: WebRig) -> Iterator[httpx.Client]:
    with client(web_rig) as http:
        assert http.get(web_rig.login_url()).status_code == 303
        yield http


def csrf_of(http: httpx.Client) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', http.get("/chat").text)
    assert found is not None
    return found.group(1)


def write_memory(rig: WebRig, name: str, text: str) -> str:
    path = rig.home / "workspace" / "memory" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return f"memory/{name}"


# -- text made to be slow to render ------------------------------------------------------------


def test_a_text_too_long_for_markdown_is_shown_escaped_as_plain_text() -> None:
    text = "[" * (MAX_MARKDOWN_CHARS + 1) + "<script>x</script>"
    html = str(markdown_html(text))
    assert "too long to render as Markdown" in html
    assert "&lt;script&gt;x&lt;/script&gt;</pre>" in html and "<script>" not in html


def test_a_huge_memory_file_of_brackets_is_shown_at_once(
    web_rig: WebRig, logged_in: httpx.Client
) -> None:
    # 2 MB of "[" took markdown-it about a minute, on the gateway's event loop: Telegram,
    # Slack and every page waited for it.
    rel = write_memory(web_rig, "brackets.md", "[" * 2_000_000)
    started = time.monotonic()
    answer = logged_in.get("/memory/file", params={"path": rel})
    assert answer.status_code == 200
    assert "too long to render as Markdown" in answer.text
    assert time.monotonic() - started < 15


def test_the_gateway_answers_while_a_page_renders_markdown(
    web_rig: WebRig, logged_in: httpx.Client
) -> None:
    rel = write_memory(web_rig, "slow.md", "[" * MAX_MARKDOWN_CHARS)  # seconds of Markdown
    took: dict[str, float] = {}

    def view() -> None:
        started = time.monotonic()
        assert logged_in.get("/memory/file", params={"path": rel}).status_code == 200
        took["view"] = time.monotonic() - started

    viewer = threading.Thread(target=view)
    viewer.start()
    time.sleep(0.3)  # the view is being rendered now
    started = time.monotonic()
    with client(web_rig) as other:
        assert other.get("/static/pinch.css").status_code == 200
    took["meanwhile"] = time.monotonic() - started
    viewer.join()
    assert took["view"] > 1.0, took  # the render was slow enough to tell
    assert took["meanwhile"] < took["view"] / 3, took
