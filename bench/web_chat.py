"""The web chat beside Telegram: time to the first streamed token, and the page's memory cost.

    .venv/bin/python bench/web_chat.py --quick        # 5 turns each, under a minute
    .venv/bin/python bench/web_chat.py --turns 30

Offline. A real `pinch gateway` process (the Telegram adapter against the fake Bot API, the
agent against the scripted model server, which streams its reply word by word) with the web page
on a free port. Each turn is one owner message and its reply, in the owner's one main session:

- **web**: the page's own requests, as its script makes them — POST /chat/send (CSRF token,
  Origin) with the page's event stream (GET /chat/events, Server-Sent Events) open; time from
  the send to the first `message` event (the reply's first words, rendered).
- **telegram**: an update pushed to the fake Bot API; time to the bot's first sendMessage (the
  reply's first words; long polling with a 1 s timeout, as configured for tests).

Then the gateway's resident memory (VmRSS of the process) after start-up and the same Telegram
turns, once with the page enabled (and used) and once with `PINCH_WEB__ENABLED=false`.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.agent_support import responder  # noqa: E402
from tests.fakes.model_server import FakeModelServer, text_reply  # noqa: E402
from tests.fakes.telegram_server import FakeTelegram  # noqa: E402
from tests.web_support import OWNER_TG, WebRig, start_web_gateway, wait_for  # noqa: E402

REPLY = "Sure — " + " ".join(f"word{n}" for n in range(40)) + "."


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def telegram_turns(rig: WebRig, turns: int) -> list[float]:
    times = []
    for n in range(turns):
        before = len(rig.tg.calls_to("sendMessage"))
        started = time.perf_counter()
        rig.tg.push(rig.tg.private_text(f"telegram question {n}"))
        wait_for(lambda b=before: len(rig.tg.calls_to("sendMessage")) > b, what="the first words")
        times.append(time.perf_counter() - started)
        wait_for(lambda: REPLY in "".join(rig.bot_texts(OWNER_TG)[-1:]), what="the whole reply")
        time.sleep(0.3)  # the turn's end (transcript written) before the next message
    return times


def web_turns(rig: WebRig, turns: int) -> list[float]:
    times = []
    with httpx.Client(base_url=rig.base, timeout=30) as http:
        assert http.get(rig.login_url(), follow_redirects=True).status_code == 200
        found = re.search(r'name="csrf" value="([^"]+)"', http.get("/chat").text)
        assert found is not None
        headers = {"X-CSRF-Token": found.group(1), "Origin": rig.base}
        with http.stream("GET", "/chat/events") as events:
            lines = events.iter_lines()
            for n in range(turns):
                started = time.perf_counter()
                files = {"text": (None, f"web question {n}"), "client_id": (None, f"bench{n:08d}")}
                assert http.post("/chat/send", files=files, headers=headers).status_code == 200
                first = None
                for line in lines:
                    if first is None and line == "event: message":
                        first = time.perf_counter() - started
                    if line.startswith("data:") and first is not None and REPLY in line:
                        break  # the whole reply shown
                    if line.startswith("data:") and '"busy": false' in line and first:
                        break
                assert first is not None
                times.append(first)
                time.sleep(0.3)
    return times


def summary(times: list[float]) -> str:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="5 turns each (under a minute)")
    args = parser.parse_args()
    turns = 5 if args.quick else args.turns
    results: dict[str, object] = {"turns": turns}
    with FakeModelServer() as model, FakeTelegram() as tg, tempfile.TemporaryDirectory() as tmp:
        model.respond_with(responder(turn=text_reply(REPLY)))
        rig = start_web_gateway(Path(tmp) / "on" / "pinch-home", model, tg)
        try:
            time.sleep(2.0)
            results["rss_started_web_on_mb"] = rss_mb(rig.proc.pid)
            telegram = telegram_turns(rig, turns)
            results["rss_after_telegram_web_on_mb"] = rss_mb(rig.proc.pid)
            web = web_turns(rig, turns)
            results["rss_after_web_turns_mb"] = rss_mb(rig.proc.pid)
        finally:
            rig.stop()
        rig = start_web_gateway(
            Path(tmp) / "off" / "pinch-home", model, tg, wait=False, PINCH_WEB__ENABLED="false"
        )
        try:
            wait_for(lambda: (rig.home / "gateway.heartbeat").exists(), what="the gateway")
            time.sleep(2.0)
            results["rss_started_web_off_mb"] = rss_mb(rig.proc.pid)
            telegram_off = telegram_turns(rig, turns)
            results["rss_after_telegram_web_off_mb"] = rss_mb(rig.proc.pid)
        finally:
            rig.stop()
    results["first_token_web"] = summary(web)
    results["first_token_telegram"] = summary(telegram)
    results["first_token_telegram_web_off"] = summary(telegram_off)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
