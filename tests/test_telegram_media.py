"""Telegram files, albums, unsupported message types and the webhook, against the fake server."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from channels.base import ChannelError
from tests.fakes.telegram_server import MB, FakeTelegram
from tests.telegram_support import Inbox, make_channel, running, until


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram() as server:
        yield server


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def workspace(tmp_path: Path) -> Path:
    return tmp_path / "workspace"


def test_photo_is_saved_in_its_largest_size_and_given_as_a_workspace_path(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            tg.push(tg.photo(b"\xff\xd8\xff the big one", caption="look"))
            [message] = await inbox.wait_for(1)
        [photo] = message.attachments
        assert message.text == "look"
        assert photo.kind == "photo"
        assert photo.error is None
        assert photo.path is not None and photo.path.startswith("inbox/")
        assert photo.path.endswith(".jpg")
        assert (workspace(tmp_path) / photo.path).read_bytes() == b"\xff\xd8\xff the big one"
        assert (workspace(tmp_path) / photo.path).stat().st_mode & 0o077 == 0

    run(scenario())


def test_a_one_megabyte_binary_document_arrives_intact(tg, tmp_path):
    content = bytes(range(256)) * (4 * 1024)  # 1 MB, every byte value

    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            tg.push(tg.document(content, file_name="dump.bin", mime_type="application/zip"))
            [message] = await inbox.wait_for(1)
        [doc] = message.attachments
        assert (doc.kind, doc.file_name) == ("document", "dump.bin")
        assert doc.mime_type == "application/zip"
        assert doc.size == len(content)
        assert doc.path is not None and doc.path.endswith("dump.bin")
        assert (workspace(tmp_path) / doc.path).read_bytes() == content
        assert message.text == ""

    run(scenario())


def test_a_document_name_cannot_leave_the_inbox(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            tg.push(tg.document(b"x", file_name="../../../etc/passwd"))
            [message] = await inbox.wait_for(1)
        path = message.attachments[0].path
        assert path is not None
        saved = (workspace(tmp_path) / path).resolve()
        assert saved.is_relative_to((workspace(tmp_path) / "inbox").resolve())

    run(scenario())


def test_a_voice_note_is_saved(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            tg.push(tg.voice(b"OggS-voice-bytes"))
            [message] = await inbox.wait_for(1)
        [voice] = message.attachments
        assert voice.kind == "voice"
        assert voice.path is not None and voice.path.endswith(".oga")
        assert (workspace(tmp_path) / voice.path).read_bytes() == b"OggS-voice-bytes"

    run(scenario())


def test_a_file_over_the_20_mb_bot_limit_is_reported_not_passed_as_a_placeholder(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            tg.push(tg.document(None, file_name="movie.mkv", size=25 * MB, caption="watch"))
            [message] = await inbox.wait_for(1)
        [doc] = message.attachments
        assert doc.path is None
        assert doc.error is not None
        assert "too large (25 MB)" in doc.error
        assert "Telegram bots can download up to 20 MB" in doc.error
        assert doc.file_name == "movie.mkv"
        assert message.text == "watch"
        assert tg.calls_to("getFile") == []

    run(scenario())


def test_getfile_refusing_a_file_without_a_known_size_says_it_is_too_big(tg, tmp_path):
    update = tg.document(None, file_name="big.iso", size=30 * MB)
    del update["message"]["document"]["file_size"]

    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            tg.push(update)
            [message] = await inbox.wait_for(1)
        error = message.attachments[0].error
        assert error is not None and "too large (over 20 MB)" in error

    run(scenario())


@pytest.mark.parametrize("kind", ["sticker", "location"])
def test_unsupported_types_reach_the_gateway_with_an_explanation(tg, tmp_path, kind):
    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            tg.push(getattr(tg, kind)())
            [message] = await inbox.wait_for(1)
        [attachment] = message.attachments
        assert attachment.path is None
        assert attachment.error is not None
        assert attachment.error.startswith(f"unsupported message type ({kind})")

    run(scenario())


def test_an_album_is_one_message_with_all_its_files(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            first, second, third = tg.album(3, caption="Holiday")
            tg.push(first)
            await until(lambda: len(tg.calls_to("getUpdates")) >= 2)
            tg.push(second, third)  # the rest arrive in a later batch, as they often do
            tg.push(tg.private_text("after the album"))
            await inbox.wait_for(2)
            await asyncio.sleep(0.5)  # an album answered more than once would show up here
        album, after = inbox.messages
        assert len(inbox.messages) == 2
        assert album.text == "Holiday"
        assert [a.kind for a in album.attachments] == ["photo"] * 3
        contents = [(workspace(tmp_path) / str(a.path)).read_bytes() for a in album.attachments]
        assert contents == [b"photo-0", b"photo-1", b"photo-2"]
        assert album.message_id == str(first["message"]["message_id"])
        assert after.text == "after the album"

    run(scenario())


def test_an_album_is_confirmed_to_telegram_only_after_it_was_handed_over(tg, tmp_path):
    inbox = Inbox()
    parts = tg.album(2)

    async def scenario():
        inbox.hold = asyncio.Event()
        async with running(tg, tmp_path, inbox):
            tg.push(*parts)
            await until(lambda: inbox.calls == 1)
            assert tg.confirmed_offset <= parts[0]["update_id"]
            inbox.hold.set()
            await inbox.wait_for(1)
            tg.push(tg.private_text("next"))
            await inbox.wait_for(2)
        assert tg.confirmed_offset > parts[-1]["update_id"]

    run(scenario())


# -- webhook


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post(url: str, body: dict, secret: str | None) -> int:
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers["X-Telegram-Bot-Api-Secret-Token"] = secret
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_webhook_mode_registers_the_secret_and_refuses_requests_without_it(tg, tmp_path):
    port = free_port()
    settings = {
        "mode": "webhook",
        "webhook_url": "https://pinch.example/telegram/hook",
        "webhook_port": port,
        "webhook_secret": SecretStr("s3cret-token"),
    }
    local = f"http://127.0.0.1:{port}/telegram/hook"

    async def scenario():
        async with running(tg, tmp_path, **settings) as (_, inbox):
            [registered] = tg.calls_to("setWebhook")
            assert registered.params["url"] == settings["webhook_url"]
            assert registered.params["secret_token"] == "s3cret-token"
            update = tg.private_text("via webhook")
            forged = await asyncio.to_thread(post, local, update, "wrong")
            missing = await asyncio.to_thread(post, local, update, None)
            accepted = await asyncio.to_thread(post, local, update, "s3cret-token")
            again = await asyncio.to_thread(post, local, update, "s3cret-token")
            messages = await inbox.wait_for(1)
        assert (forged, missing, accepted, again) == (403, 403, 200, 200)
        assert [m.text for m in messages] == ["via webhook"]
        assert tg.calls_to("getUpdates") == []

    run(scenario())


def test_webhook_mode_without_a_secret_is_refused_with_advice(tg, tmp_path):
    async def scenario():
        channel = make_channel(tg, tmp_path, mode="webhook", webhook_url="https://x.example/h")
        with pytest.raises(ChannelError, match="PINCH_TELEGRAM__WEBHOOK_SECRET"):
            await channel.start(Inbox())
        await channel.stop()

    run(scenario())
