"""The web page's chat channel (channels/web.py) on its own: what the page sends becomes an
InboundMessage for the gateway, what the gateway sends becomes events every open page gets, and
a page that reconnects misses nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from channels.base import InboundMessage, OutboundMessage
from channels.web import MAX_UPLOAD_BYTES, Upload, WebChannel, WebChannelError
from memory.files.inbox import Inbox


def test_a_message_from_the_page_is_the_owners_direct_message(tmp_path: Path) -> None:
    async def scenario() -> list[InboundMessage]:
        channel = WebChannel(inbox=Inbox(tmp_path / "workspace"))
        got: list[InboundMessage] = []

        async def handler(msg: InboundMessage) -> None:
            got.append(msg)

        await channel.start(handler)
        await channel.receive("hello", client_id="abcdefgh1234")
        return got

    [msg] = asyncio.run(scenario())
    assert (msg.channel, msg.chat_type, msg.sender_id, msg.text) == (
        "web",
        "direct",
        "owner",
        "hello",
    )
    assert msg.dedup_key == "owner:abcdefgh1234"  # the page's id: a double send is one message


def test_a_message_without_a_valid_id_or_before_start_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        channel = WebChannel(inbox=Inbox(tmp_path / "workspace"))
        with pytest.raises(WebChannelError, match="not running"):
            await channel.receive("hi", client_id="abcdefgh1234")

        async def handler(msg: InboundMessage) -> None:
            raise AssertionError("not reached")

        await channel.start(handler)
        for bad in ("", "short", "x" * 65, "../../etc/passwd", "id with spaces"):
            with pytest.raises(WebChannelError, match="reload the page"):
                await channel.receive("hi", client_id=bad)

    asyncio.run(scenario())


def test_uploads_go_to_the_inbox_and_a_file_too_big_is_reported(tmp_path: Path) -> None:
    async def scenario() -> InboundMessage:
        channel = WebChannel(inbox=Inbox(tmp_path / "workspace"))
        got: list[InboundMessage] = []

        async def handler(msg: InboundMessage) -> None:
            got.append(msg)

        await channel.start(handler)
        uploads = [
            Upload("../../photo.jpg", b"\xff\xd8\xff", "image/jpeg"),
            Upload("big.pdf", b"0" * (MAX_UPLOAD_BYTES + 1), "application/pdf"),
        ]
        await channel.receive("", client_id="upload-0001", uploads=uploads)
        return got[0]

    msg = asyncio.run(scenario())
    photo, big = msg.attachments
    assert photo.kind == "photo" and photo.path is not None
    assert photo.path.startswith("inbox/") and photo.path.endswith("/photo.jpg")
    assert (tmp_path / "workspace" / photo.path).read_bytes() == b"\xff\xd8\xff"
    assert big.kind == "document" and big.path is None and big.error == "larger than 20 MB"


def test_every_open_page_sees_a_reply_as_it_is_sent_and_edited(tmp_path: Path) -> None:
    async def scenario() -> None:
        channel = WebChannel(inbox=Inbox(tmp_path / "workspace"))
        with channel.listen() as one, channel.listen() as two:
            [sent] = await channel.send(OutboundMessage("web", "owner", "Hel"))
            await channel.edit(sent, "Hello")
            await channel.typing("owner")
            for page in (one, two):
                first, second, third = [await page.get(1.0) for _ in range(3)]
                assert first and second and third
                assert (first.kind, first.message_id, first.text) == (
                    "message",
                    sent.message_id,
                    "Hel",
                )
                assert (second.message_id, second.text) == (sent.message_id, "Hello")
                assert third.kind == "typing"
            assert await one.get(0.05) is None  # nothing more

    asyncio.run(scenario())


def test_a_page_that_reconnects_gets_what_it_missed_and_nothing_twice(tmp_path: Path) -> None:
    async def scenario() -> None:
        channel = WebChannel(inbox=Inbox(tmp_path / "workspace"))
        cursor = channel.cursor()  # what a new page is given
        [first] = await channel.send(OutboundMessage("web", "owner", "one"))
        with channel.listen(cursor) as page:  # reconnecting after missing "one"
            event = await page.get(1.0)
            assert event is not None and event.text == "one"
            seen = event.id
        await channel.send(OutboundMessage("web", "owner", "two"))
        with channel.listen(seen) as page:
            event = await page.get(1.0)
            assert event is not None and event.text == "two"
            assert await page.get(0.05) is None
        with channel.listen("0000-7") as page:  # an id of an earlier gateway run: everything
            texts = [e.text for e in [await page.get(1.0), await page.get(1.0)] if e]
            assert texts == ["one", "two"]
        with channel.listen() as page:  # a fresh page reads the transcript instead
            assert await page.get(0.05) is None
        assert first.message_id

    asyncio.run(scenario())


def test_stopping_the_channel_ends_every_open_event_stream(tmp_path: Path) -> None:
    async def scenario() -> None:
        channel = WebChannel(inbox=Inbox(tmp_path / "workspace"))
        with channel.listen() as page:
            await channel.stop()
            assert await page.get(1.0) is None and page.closed

    asyncio.run(scenario())


def test_the_health_check_says_where_the_page_is_served(tmp_path: Path) -> None:
    from app.web.web_config import WebConfig

    channel = WebChannel(WebConfig(port=9999), inbox=Inbox(tmp_path / "workspace"))
    health = asyncio.run(channel.check())
    assert health.ok and "127.0.0.1:9999" in health.detail


def test_the_log_tail_for_the_page_is_redacted_like_the_log() -> None:
    import logging

    from app.logging_setup import RecentLines, add_redacted_handler

    recent = RecentLines(capacity=3)
    add_redacted_handler(recent, ["123456:SECRET-BOT-TOKEN"])
    log = logging.getLogger("pinch.test.tail")
    try:
        for n in range(4):
            log.warning("line %d with 123456:SECRET-BOT-TOKEN", n)
    finally:
        logging.getLogger().removeHandler(recent)
    lines = recent.tail(10)
    assert len(lines) == 3 and "line 3" in lines[-1] and "line 0" not in " ".join(lines)
    assert not any("SECRET-BOT-TOKEN" in line for line in lines)
    assert recent.tail(1) == lines[-1:]
