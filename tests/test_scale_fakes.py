"""bench/scale.py's fakes (bench/scale_fakes.py), each in its own process, driven by the real
python-telegram-bot and anthropic SDK: what they answer, what they time, and the 409 Conflict
of two overlapping long polls on one token."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import pytest
from telegram import Bot
from telegram.error import Conflict

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "100001:AAscale_0001_token_for_the_test"


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[object]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(kind: str) -> str:
        port_file = tmp_path / f"{kind}.port"
        command = [sys.executable, str(ROOT / "bench" / "scale_fakes.py"), kind]
        procs.append(
            subprocess.Popen(
                [*command, "--port-file", str(port_file)],
                cwd=ROOT,
                env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
            )
        )
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text()):
            assert time.monotonic() < deadline, f"the {kind} fake did not start"
            time.sleep(0.05)
        return f"http://127.0.0.1:{int(port_file.read_text())}"

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


def test_telegram_fake_serves_the_bot_api_and_times_each_message(fake) -> None:  # type: ignore[no-untyped-def]
    url = fake("telegram")
    httpx.post(f"{url}/_scale/bots", json={"tokens": [TOKEN]}).raise_for_status()

    async def scenario() -> tuple[list[object], int]:
        async with Bot(TOKEN, base_url=f"{url}/bot") as bot:
            assert (await bot.get_me()).id == 100001
            poll = asyncio.ensure_future(bot.get_updates(timeout=5))
            await asyncio.sleep(0.3)  # the long poll waits for an update
            httpx.post(f"{url}/_scale/push", json={"items": [[0, 1001, "hi m-0-1-r1"]]})
            updates = await poll
            assert updates[0].message is not None
            assert updates[0].message.text == "hi m-0-1-r1"
            sent = await bot.send_message(1001, "re: m-0-1-r1 (streaming)")
            await bot.edit_message_text("re: m-0-1-r1", chat_id=1001, message_id=sent.message_id)
            # Two overlapping polls on one token (two processes): the older is answered 409.
            offset = updates[0].update_id + 1
            older = asyncio.ensure_future(bot.get_updates(offset=offset, timeout=5))
            await asyncio.sleep(0.3)
            async with Bot(TOKEN, base_url=f"{url}/bot") as other:
                newer = asyncio.ensure_future(other.get_updates(offset=offset, timeout=0))
                results = await asyncio.gather(older, newer, return_exceptions=True)
                return list(results), sent.message_id

    results, _ = asyncio.run(scenario())
    assert isinstance(results[0], Conflict)
    assert results[1] == ()
    report = httpx.get(f"{url}/_scale/report").json()
    assert report["conflicts"] == 1
    assert report["answered"] == {"m-0-1-r1": 1}  # sent once, then edited in place
    pushed, fetched, replied = (report[k]["m-0-1-r1"] for k in ("pushed", "fetched", "replied"))
    assert pushed <= fetched <= replied


def test_model_fake_answers_the_messages_api_with_the_tokens(fake) -> None:  # type: ignore[no-untyped-def]
    url = fake("model")

    async def scenario() -> tuple[str, str]:
        client = anthropic.AsyncAnthropic(api_key="test-key", base_url=url, max_retries=0)
        async with client.messages.stream(
            model="claude-test",
            max_tokens=100,
            messages=[{"role": "user", "content": "hello m-3-4-r5 and m-3-4-r6"}],
        ) as stream:
            streamed = "".join([text async for text in stream.text_stream])
        whole = await client.messages.create(
            model="claude-test", max_tokens=100, messages=[{"role": "user", "content": "m-1-1-r1"}]
        )
        await client.close()
        block = whole.content[0]
        assert block.type == "text"
        return streamed, block.text

    streamed, whole = asyncio.run(scenario())
    assert streamed == "re: m-3-4-r5 m-3-4-r6"
    assert whole == "re: m-1-1-r1"
    report = httpx.get(f"{url}/_scale/report").json()
    assert report["calls"] == 2
    began, ended = report["timing"]["m-3-4-r5"]
    assert began <= ended
