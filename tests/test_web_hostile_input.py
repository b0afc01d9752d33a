"""The web page against hostile input, each against a real `pinch gateway` serving the page:
stored text made to be slow to render, malformed and oversized request bodies, numbers no
database holds, right-to-left overrides in a stranger's name (in Chromium). None may stall the
gateway, end in a server error or change how the page's own words read."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.web.render import MAX_MARKDOWN_CHARS, markdown_html
from tests import web_support
from tests.fakes.telegram_server import STRANGER
from tests.web_support import WebRig, wait_for

browser, web_rig, web_page = web_support.browser, web_support.web_rig, web_support.web_page


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
    text = "[" * MAX_MARKDOWN_CHARS  # the slowest Markdown the page still renders
    started = time.monotonic()
    markdown_html(text)
    render_s = time.monotonic() - started  # ≈ 1 s on a fast machine, more on a slower one
    assert render_s > 0.4, render_s  # slow enough to tell a wait from none
    rel = write_memory(web_rig, "slow.md", text)
    took: dict[str, float] = {}

    def view() -> None:
        started = time.monotonic()
        assert logged_in.get("/memory/file", params={"path": rel}).status_code == 200
        took["view"] = time.monotonic() - started

    viewer = threading.Thread(target=view)
    viewer.start()
    time.sleep(render_s / 4)  # the view is being rendered now
    started = time.monotonic()
    with client(web_rig) as other:
        assert other.get("/static/pinch.css").status_code == 200
    took["meanwhile"] = time.monotonic() - started
    viewer.join()
    assert took["view"] > render_s / 2, took  # the page did render it
    assert took["meanwhile"] < render_s / 3, took  # and nothing waited for it


# -- malformed and oversized requests ----------------------------------------------------------

FORM = "application/x-www-form-urlencoded"


def test_a_form_that_cannot_be_parsed_is_refused_not_a_server_error(
    web_rig: WebRig, logged_in: httpx.Client
) -> None:
    csrf = csrf_of(logged_in)
    origin = {"Origin": web_rig.base}
    bad_utf8 = b"csrf=" + csrf.encode() + b"&path=\xff\xfe&hash=x&text=a"
    broken = [
        ({"Content-Type": FORM}, bad_utf8),
        ({"Content-Type": FORM, "X-CSRF-Token": csrf}, bad_utf8),
        ({"Content-Type": "multipart/form-data", "X-CSRF-Token": csrf}, b"no boundary"),
        ({"Content-Type": "multipart/form-data; boundary=b"}, b"--b\r\nbroken"),
    ]
    for headers, body in broken:
        answer = logged_in.post("/memory/edit", content=body, headers={**origin, **headers})
        assert answer.status_code == 400, (headers, answer.status_code, answer.text)
        assert "could not be read" in answer.text
    with client(web_rig) as stranger:  # before any login, on the one form that takes a POST
        answer = stranger.post(
            "/login", content=b"password=\xff", headers={**origin, "Content-Type": FORM}
        )
        assert answer.status_code == 400
    assert "Error handling request" not in web_rig.log_text()


def test_a_body_larger_than_its_path_takes_is_refused_before_it_is_read(
    web_rig: WebRig, logged_in: httpx.Client
) -> None:
    origin = {"Origin": web_rig.base}
    with client(web_rig) as stranger:  # 20 MB into the login form, before any session
        big = b"password=" + b"x" * (1024 * 1024)
        answer = stranger.post("/login", content=big, headers={**origin, "Content-Type": FORM})
        assert answer.status_code == 413
    csrf = csrf_of(logged_in)
    huge_edit = {"csrf": csrf, "path": "MEMORY.md", "hash": "x", "text": "x" * (5 * 1024 * 1024)}
    assert logged_in.post("/memory/edit", data=huge_edit, headers=origin).status_code == 413
    # The chat still takes a file of a few megabytes (its limit is 20 MB a file).
    files: dict[str, Any] = {
        "text": (None, "a photo"),
        "client_id": (None, f"id{time.time_ns()}"),
        "files": ("big.png", b"\x89PNG" + b"0" * (5 * 1024 * 1024), "image/png"),
    }
    sent = logged_in.post("/chat/send", files=files, headers={**origin, "X-CSRF-Token": csrf})
    assert sent.status_code == 200, sent.text


def test_a_number_no_database_holds_is_not_found(web_rig: WebRig, logged_in: httpx.Client) -> None:
    csrf = csrf_of(logged_in)
    huge = "9" * 30  # past SQLite's 64-bit integers: was a server error
    for path in (f"/automations/jobs/{huge}/pause", f"/automations/intents/{huge}/cancel"):
        answer = logged_in.post(path, data={"csrf": csrf}, headers={"Origin": web_rig.base})
        assert answer.status_code == 404, (path, answer.status_code)


def test_a_superscript_digit_in_a_page_number_is_no_server_error(
    logged_in: httpx.Client,
) -> None:
    # "²".isdigit() is true, but int("²") fails.
    assert logged_in.get("/chat", params={"before": "²"}).status_code == 200


def test_no_answer_names_the_server_software(web_rig: WebRig, logged_in: httpx.Client) -> None:
    for path in ("/", "/login", "/static/pinch.css", "/no-such-page"):
        answer = logged_in.get(path)
        assert answer.headers["server"] == "Pinch", path
    refused = logged_in.get("/", headers={"Host": "evil.example"})
    assert refused.status_code == 403 and refused.headers["server"] == "Pinch"


def test_a_head_request_leaves_a_login_link_unused(web_rig: WebRig) -> None:
    url = web_rig.login_url()
    with client(web_rig) as checker:  # a link checker or a preview looks at it first
        looked = checker.head(url)
        assert looked.status_code == 200
        assert "pinch_session=" not in looked.headers.get("set-cookie", "")
    with client(web_rig) as owner:
        assert owner.get(url).status_code == 303  # was 403: the HEAD had used it up


# -- a memory file deleted while it is edited ---------------------------------------------------


def test_an_edit_of_a_file_deleted_meanwhile_is_kept_and_saved_again(
    web_rig: WebRig, logged_in: httpx.Client
) -> None:
    rel = write_memory(web_rig, f"gone-{time.time_ns()}.md", "the old note\n")
    time.sleep(0.5)  # the index sees it
    editor = logged_in.get("/memory/edit", params={"path": rel}).text
    opened = re.search(r'name="hash" value="([^"]+)"', editor)
    assert opened is not None
    (web_rig.home / "workspace" / rel).unlink()  # Dreaming, forget or an editor removed it
    form = {"csrf": csrf_of(logged_in), "path": rel, "text": "my long edit", "hash": opened[1]}
    origin = {"Origin": web_rig.base}
    kept = logged_in.post("/memory/edit", data=form, headers=origin)
    assert kept.status_code == 409, kept.text  # was a 400 page, and the edit was lost
    assert "was deleted since you opened it" in kept.text and "my long edit</textarea>" in kept.text
    assert not (web_rig.home / "workspace" / rel).exists()  # nothing written without asking
    again = re.search(r'name="hash" value="([^"]+)"', kept.text)
    assert again is not None and again[1] == "absent"
    saved = logged_in.post("/memory/edit", data={**form, "hash": again[1]}, headers=origin)
    assert saved.status_code == 303
    assert (web_rig.home / "workspace" / rel).read_text(encoding="utf-8") == "my long edit"


def test_a_file_the_page_may_not_write_is_not_created(
    web_rig: WebRig, logged_in: httpx.Client
) -> None:
    form = {"csrf": csrf_of(logged_in), "text": "x", "hash": "absent"}
    for path in ("notes.txt", "SOUL.md", "memory/../x.md", "/tmp/x.md", "memory/.hidden.md"):
        answer = logged_in.post(
            "/memory/edit", data={**form, "path": path}, headers={"Origin": web_rig.base}
        )
        assert answer.status_code == 400, (path, answer.status_code)
    assert not (web_rig.home / "workspace" / "notes.txt").exists()


# -- right-to-left overrides -------------------------------------------------------------------

RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: the rest reads backwards, up to a PDF or the block end

# Whether, in the element `selector` whose text contains `(ID)`, the "(" is drawn left of the ")".
PARENS_IN_ORDER = """([selector, id]) => {
  for (const element of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
    const where = (ch) => {
      walker.currentNode = element;
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const at = node.data.indexOf(ch);
        if (at >= 0) {
          const range = document.createRange();
          range.setStart(node, at); range.setEnd(node, at + 1);
          return range.getBoundingClientRect().left;
        }
      }
      return null;
    };
    if (!element.textContent.includes(id)) continue;
    return where("(") < where(")");
  }
  return null;
}"""


def test_a_right_to_left_override_in_a_strangers_name_stays_inside_the_name(
    web_page: Any, web_rig: WebRig
) -> None:
    sender = {**STRANGER, "first_name": f"Sam{RLO}"}
    web_rig.tg.push(web_rig.tg.private_text("hello, may I?", sender=sender))
    wait_for(lambda: bool(web_rig.bot_texts(STRANGER["id"])), what="the pairing code")
    web_page.goto(web_rig.url("/"))
    # The overview's pending request reads "Sam (222)", not "Sam )222(".
    assert web_page.evaluate(PARENS_IN_ORDER, ["dd", f"({STRANGER['id']})"]) is True
    web_page.goto(web_rig.url("/access"))
    assert web_page.evaluate(PARENS_IN_ORDER, ["#pending td", "Sam"]) is True


def test_the_editor_saves_a_right_to_left_override_exactly(web_page: Any, web_rig: WebRig) -> None:
    text = f"Shown as is: {RLO}txt.exe and \u2067isolated\n"
    rel = write_memory(web_rig, f"bidi-{time.time_ns()}.md", text)
    web_page.goto(web_rig.url(f"/memory/edit?path={rel}"))
    with web_page.expect_navigation():
        web_page.click("form.editor button[type=submit]")
    assert "Saved" in web_page.inner_text("main")
    assert (web_rig.home / "workspace" / rel).read_text(encoding="utf-8") == text
