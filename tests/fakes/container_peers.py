"""The peers of scripts/container-test.sh: a fake Telegram Bot API, a scripted model server, and a
small control endpoint the script calls to play the owner.

    python -m tests.fakes.container_peers PEERS_JSON

writes {"telegram": URL, "model": URL, "control": URL} to PEERS_JSON once listening, then serves
until killed. `POST /ask` (form: text, expect) pushes a private message from the owner (Telegram
user 111) and waits up to 90 s for the bot to send a message containing `expect`; it answers 200
with that message, or 504 with what the bot did send.

The model answers "Hello, owner." to a first message, and to "What was my code word?" it names
the code word only if an earlier message carrying it is in the request it received — so the
answer proves the conversation survived a restart of the container.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from tests.fakes.local_server import LocalHTTPServer
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply
from tests.fakes.telegram_server import OWNER, FakeTelegram

TOKEN = "123456:container-test-token-aaaaaaaaaaaaaaaaaaaaaaa"
CODE_WORD = re.compile(r"code word is ([A-Z]{4,})")


def answer(request: RecordedRequest) -> Reply:
    last = request.last_user_text()
    if "code word?" in last:
        found = CODE_WORD.search(json.dumps(request.body.get("messages", [])))
        return text_reply(
            f"Your code word is {found.group(1)}." if found else "I don't know your code word."
        )
    if "Reply with one or two words" in json.dumps(request.body) or not last:
        return text_reply("note")  # a session-note slug or anything else the agent asks
    return text_reply("Hello, owner.")


def main(peers_path: str) -> None:
    telegram = FakeTelegram(token=TOKEN)
    model = FakeModelServer()
    model.respond_with(answer)
    telegram.__enter__()
    model.start()

    class Control(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            seen = len(telegram.sent)
            telegram.push(telegram.private_text(form["text"], sender=OWNER))
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                for sent in telegram.sent[seen:]:
                    if form["expect"] in sent.text:
                        return self._reply(200, sent.text)
                time.sleep(0.2)
            self._reply(504, "no matching reply; the bot sent: " + repr(telegram.sent[seen:]))

        def _reply(self, status: int, text: str) -> None:
            body = text.encode()
            self.send_response(status)
            self.send_header("content-type", "text/plain; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    control = LocalHTTPServer(Control)
    control.start()
    Path(peers_path).write_text(
        json.dumps(
            {
                "telegram": telegram.url,
                "model": model.url,
                "control": f"http://127.0.0.1:{control.port}",
            }
        )
    )
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1])
