"""The Slack adapter against a fake Slack (Web API + Socket Mode websocket) on 127.0.0.1, driven
by the real slack-bolt / slack_sdk clients."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import json
import logging
import re
import socket
import time
import types
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import slack_sdk.socket_mode.async_client
from pydantic import SecretStr

from channels.base import ChannelError, InboundMessage, OutboundMessage
from channels.channel_config import SlackConfig
from channels.slack.adapter import SCOPES, SlackChannel
from memory.files.inbox import Inbox as FileInbox
from tests.fakes.slack_server import BOT_USER_ID, FakeSlack


def run(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an async test in a fresh event loop (pytest-asyncio is not a dependency)."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(test(*args, **kwargs), 30))

    return wrapper


class Inbox:
    """The gateway's side: records every InboundMessage, lets a test wait for them."""

    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self._changed = asyncio.Condition()

    async def __call__(self, message: InboundMessage) -> None:
        async with self._changed:
            self.messages.append(message)
            self._changed.notify_all()

    async def wait(self, count: int = 1, timeout: float = 5.0) -> list[InboundMessage]:
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: len(self.messages) >= count), timeout
            )
        return self.messages


def slack_config(slack: FakeSlack, **changes: Any) -> SlackConfig:
    values: dict[str, Any] = {
        "bot_token": SecretStr(slack.bot_token),
        "app_token": SecretStr(slack.app_token),
        "api_base_url": slack.api_url,
        "timeout_s": 2.0,
        "ping_interval_s": 0.5,
    }
    values.update(changes)
    return SlackConfig(**values)


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path, *, handler: Any = None, **changes: Any
) -> AsyncIterator[tuple[FakeSlack, SlackChannel, Inbox]]:
    async with FakeSlack() as slack:
        channel = SlackChannel(
            slack_config(slack, **changes),
            inbox=FileInbox(tmp_path / "workspace"),
            state_dir=tmp_path / "state",
        )
        inbox = Inbox()
        await channel.start(handler or inbox)
        await slack.wait_connected()
        try:
            yield slack, channel, inbox
        finally:
            await channel.stop()


async def settle(slack: FakeSlack, envelope_id: str, channel: SlackChannel) -> None:
    """Wait until an envelope is acked and whatever it started in the adapter has finished."""
    await slack.wait_acked(envelope_id)
    for _ in range(3):
        await asyncio.sleep(0)
    while channel._lanes:
        await asyncio.gather(*channel._lanes.values(), return_exceptions=True)


# -- receiving ---------------------------------------------------------------------------------


@run
async def test_a_direct_message_arrives_as_a_direct_mentioned_message(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, _channel, inbox):
        slack.users["U0OWNER"] = {
            "id": "U0OWNER",
            "name": "ann",
            "profile": {"display_name": "Ann"},
        }
        event = slack.dm("hello &amp; welcome")
        await slack.push_event(event)
        [message] = await inbox.wait()
    assert message.channel == "slack"
    assert message.chat_type == "direct"
    assert message.chat_id == "D0DM"
    assert message.sender_id == "U0OWNER"
    assert message.sender_name == "Ann"
    assert message.text == "hello & welcome"
    assert message.mentioned is True
    assert message.thread_id is None  # DMs are not threaded
    assert message.dedup_key == f"D0DM:{event['ts']}"
    assert message.message_id == event["ts"]


@run
async def test_a_mention_delivered_as_message_and_app_mention_is_one_message(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as (slack, channel, inbox):
        message, mention = slack.mention_pair("what's up?")
        await slack.push_event(message)
        last = await slack.push_event(mention)
        await settle(slack, last, channel)
    [got] = inbox.messages
    assert got.chat_type == "channel"
    assert got.mentioned is True
    assert got.text == "what's up?"  # the <@bot> mention is stripped
    assert got.thread_id == message["ts"]  # a top-level mention opens a thread for the reply


@run
async def test_an_app_mention_arriving_first_is_complete(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, channel, inbox):
        message, mention = slack.mention_pair("hi", channel="G0PRIV")
        await slack.push_event(mention)
        last = await slack.push_event(message | {"channel_type": "group"})
        await settle(slack, last, channel)
    [got] = inbox.messages
    assert got.chat_type == "group"  # app_mention has no channel_type: conversations.info said
    assert got.mentioned is True
    assert got.thread_id == message["ts"]
    assert got.dedup_key == f"G0PRIV:{message['ts']}"


@run
async def test_a_retry_of_a_delivered_event_gives_no_second_message(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, channel, inbox):
        event = slack.dm("once")
        first = await slack.push_event(event, event_id="Ev1")
        await settle(slack, first, channel)
        retry = await slack.push_event(
            event, event_id="Ev1", retry_attempt=1, retry_reason="timeout"
        )
        await settle(slack, retry, channel)
    assert [m.text for m in inbox.messages] == ["once"]
    assert retry in slack.acks  # the retry was acknowledged, so Slack stops retrying


@run
async def test_a_retry_whose_first_delivery_was_lost_is_delivered(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, _channel, inbox):
        await slack.push_event(
            slack.dm("only copy"), event_id="Ev9", retry_attempt=2, retry_reason="http_timeout"
        )
        [got] = await inbox.wait()
    assert got.text == "only copy"


@run
async def test_every_envelope_is_acked_before_the_gateway_handler_finishes(tmp_path: Path) -> None:
    release = asyncio.Event()
    started = asyncio.Event()
    handled: list[InboundMessage] = []

    async def slow_gateway(message: InboundMessage) -> None:
        started.set()
        await release.wait()
        handled.append(message)

    async with running(tmp_path, handler=slow_gateway) as (slack, channel, _inbox):
        envelope = await slack.push_event(slack.dm("take your time"))
        await asyncio.wait_for(started.wait(), 5)
        await slack.wait_acked(envelope)  # acked while the handler is still blocked
        assert handled == []
        release.set()
        await settle(slack, envelope, channel)
    assert len(handled) == 1


@run
async def test_a_slow_chat_does_not_hold_up_another_chat(tmp_path: Path) -> None:
    release = asyncio.Event()
    inbox = Inbox()

    async def gateway(message: InboundMessage) -> None:
        if message.chat_id == "D0SLOW":
            await release.wait()
        await inbox(message)

    async with running(tmp_path, handler=gateway) as (slack, _channel, _):
        await slack.push_event(slack.dm("slow", channel="D0SLOW"))
        await slack.push_event(slack.dm("fast", channel="D0FAST"))
        [got] = await inbox.wait(1)
        assert got.text == "fast"
        release.set()
        await inbox.wait(2)


@run
async def test_a_message_in_another_thread_is_not_lost_while_the_gateway_is_busy(
    tmp_path: Path,
) -> None:
    release = asyncio.Event()
    inbox = Inbox()

    async def busy_gateway(message: InboundMessage) -> None:
        if message.text == "first":
            await release.wait()
        await inbox(message)

    async with running(tmp_path, handler=busy_gateway) as (slack, _channel, _):
        one, _ = slack.mention_pair("first", thread_ts="1764547201.000001")
        two, _ = slack.mention_pair("second", thread_ts="1764547202.000001")
        await slack.push_event(one)
        envelope = await slack.push_event(two)
        await slack.wait_acked(envelope)
        release.set()
        got = await inbox.wait(2)
    assert [(m.text, m.thread_id) for m in got] == [
        ("first", "1764547201.000001"),
        ("second", "1764547202.000001"),
    ]


@run
async def test_messages_in_one_chat_reach_the_gateway_in_order(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, _channel, inbox):
        for i in range(20):
            await slack.push_event(slack.dm(f"m{i}"))
        await inbox.wait(20)
    assert [m.text for m in inbox.messages] == [f"m{i}" for i in range(20)]


@run
async def test_the_bots_own_messages_are_ignored(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, channel, inbox):
        own = await slack.push_event(slack.bot_message("my own reply", own=True))
        await settle(slack, own, channel)
        await slack.push_event(slack.dm("after"))
        await inbox.wait()
    assert [m.text for m in inbox.messages] == ["after"]


@run
async def test_other_bots_are_ignored_by_default(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, channel, inbox):
        other = await slack.push_event(slack.bot_message(f"<@{BOT_USER_ID}> ping"))
        await settle(slack, other, channel)
    assert inbox.messages == []


@run
async def test_edits_deletions_and_joins_are_not_messages(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, channel, inbox):
        envelopes = [
            await slack.push_event(slack.message_changed()),
            await slack.push_event(slack.channel_message("", subtype="channel_join")),
            await slack.push_event(slack.channel_message("", subtype="message_deleted")),
        ]
        for envelope in envelopes:
            await settle(slack, envelope, channel)
    assert inbox.messages == []
    assert all(e in slack.acks for e in envelopes)


@run
async def test_a_channel_message_without_mention_is_not_mentioned(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, _channel, inbox):
        await slack.push_event(slack.channel_message("just chatting"))
        [got] = await inbox.wait()
    assert got.mentioned is False
    assert got.thread_id is None


@run
async def test_a_follow_up_in_a_thread_the_bot_joined_needs_no_mention(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, channel, inbox):
        message, mention = slack.mention_pair("start")
        await slack.push_event(mention)
        [first] = await inbox.wait()
        assert first.thread_id is not None
        await channel.send(OutboundMessage("slack", first.chat_id, "Sure.", first.thread_id))
        await slack.push_event(slack.channel_message("and then?", thread_ts=message["ts"]))
        _, follow_up = await inbox.wait(2)
    assert follow_up.mentioned is True
    assert follow_up.thread_id == message["ts"]
    assert slack.posted[0]["thread_ts"] == message["ts"]


@run
async def test_a_joined_thread_is_remembered_across_a_restart(tmp_path: Path) -> None:
    async with running(tmp_path) as (_slack, channel, _inbox):
        await channel.send(
            OutboundMessage("slack", "C0GEN", "hello", thread_id="1764547201.000001")
        )
    async with running(tmp_path) as (slack, _channel, inbox):
        await slack.push_event(slack.channel_message("more", thread_ts="1764547201.000001"))
        [got] = await inbox.wait()
    assert got.mentioned is True


@run
async def test_a_thread_the_bot_never_joined_still_needs_a_mention(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, _channel, inbox):
        await slack.push_event(
            slack.channel_message("people talking", thread_ts="1764547201.000001")
        )
        [got] = await inbox.wait()
    assert got.mentioned is False
    assert got.thread_id == "1764547201.000001"


@run
async def test_bang_commands_work_in_threads(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, _channel, inbox):
        await slack.push_event(slack.channel_message("!new", thread_ts="1764547201.000001"))
        await slack.push_event(slack.dm("!Status please"))
        await slack.push_event(slack.dm("!newer is not a command"))
        _message, mention = slack.mention_pair("!reset", thread_ts="1764547202.000001")
        await slack.push_event(mention)
        got = await inbox.wait(4)
    texts = sorted(m.text for m in got)  # two chats: no order between them
    assert texts == ["!newer is not a command", "/new", "/reset", "/status please"]


@run
async def test_a_gateway_failure_lets_the_twin_event_through(tmp_path: Path) -> None:
    inbox = Inbox()
    calls = 0

    async def flaky_gateway(message: InboundMessage) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("database is locked")
        await inbox(message)

    async with running(tmp_path, handler=flaky_gateway) as (slack, channel, _):
        message, mention = slack.mention_pair("hello")
        first = await slack.push_event(message)
        await settle(slack, first, channel)
        await slack.push_event(mention)
        [got] = await inbox.wait()
    assert got.text == "hello"


@run
async def test_malformed_and_unknown_envelopes_are_logged_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pinch")
    async with running(tmp_path) as (slack, channel, inbox):
        await slack.push_raw("not json at all")
        await slack.push_raw('{"broken json')
        await slack.push_raw("[1, 2]")
        await slack.push_raw(
            json.dumps({"type": "events_api", "envelope_id": "e-x", "payload": {}})
        )
        await slack.push_raw(
            json.dumps({"type": "something_new", "envelope_id": "e-y", "payload": {}})
        )
        unknown = await slack.push_event({"type": "reaction_added", "user": "U1", "reaction": "+1"})
        odd = await slack.push_event({"type": "message", "text": "no channel or ts"})
        await settle(slack, unknown, channel)
        await settle(slack, odd, channel)
        await slack.push_event(slack.dm("still alive"))
        [got] = await inbox.wait()
    assert got.text == "still alive"
    assert {"e-x", "e-y", unknown, odd} <= set(slack.acks)
    for record in caplog.records:
        assert record.exc_info is None, record.getMessage()
        assert "\n" not in record.getMessage()


@run
async def test_a_rate_limited_name_lookup_does_not_hold_up_a_message(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, _channel, inbox):
        slack.users["U0OWNER"] = {"id": "U0OWNER", "name": "ann", "profile": {}}
        slack.rate_limit("users.info", retry_after=30)
        await slack.push_event(slack.dm("urgent"))
        [got] = await inbox.wait(timeout=3)
        assert got.text == "urgent"
        assert got.sender_name is None
        await slack.push_event(slack.dm("later"))  # the name is asked for again
        _, later = await inbox.wait(2)
    assert later.sender_name == "ann"


# -- files -------------------------------------------------------------------------------------


@run
async def test_a_shared_file_is_saved_to_the_inbox(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, _channel, inbox):
        file = slack.add_file(
            b"%PDF-1.7 binary\x00\xff", name="Q3 report.pdf", mimetype="application/pdf"
        )
        await slack.push_event(slack.file_share("the report", [file]))
        [got] = await inbox.wait()
    [attachment] = got.attachments
    assert got.text == "the report"
    assert attachment.error is None
    assert attachment.kind == "document"
    assert attachment.path is not None
    day = time.strftime("%Y-%m-%d")
    assert attachment.path.startswith(f"inbox/{day}/")
    assert attachment.path.endswith("Q3_report.pdf")
    saved = tmp_path / "workspace" / attachment.path
    assert saved.read_bytes() == b"%PDF-1.7 binary\x00\xff"


@run
async def test_a_file_over_the_size_cap_is_reported_not_downloaded(tmp_path: Path) -> None:
    async with running(tmp_path, max_download_mb=1) as (slack, _channel, inbox):
        file = slack.add_file(b"x" * 10, name="big.mov", mimetype="video/quicktime")
        file["size"] = 5 * 1024 * 1024
        await slack.push_event(slack.file_share("", [file]))
        [got] = await inbox.wait()
    [attachment] = got.attachments
    assert attachment.path is None
    assert attachment.kind == "video"
    assert (
        attachment.error is not None and "5.0 MB" in attachment.error and "1 MB" in attachment.error
    )
    assert slack.calls_to("files.download") == []


@run
async def test_a_file_that_grows_past_the_cap_while_downloading_is_dropped(tmp_path: Path) -> None:
    async with running(tmp_path, max_download_mb=1) as (slack, _channel, inbox):
        file = slack.add_file(b"x" * (1024 * 1024 + 1), name="liar.bin")
        file["size"] = 10  # the event understated the size
        await slack.push_event(slack.file_share("", [file]))
        [got] = await inbox.wait()
    [attachment] = got.attachments
    assert attachment.path is None and attachment.error is not None
    assert list((tmp_path / "workspace" / "inbox").rglob("*liar*")) == []


@run
async def test_a_missing_files_scope_is_reported_not_saved_as_a_file(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, _channel, inbox):
        slack.files_scope = False
        await slack.push_event(slack.file_share("", [slack.add_file(b"data")]))
        [got] = await inbox.wait()
    [attachment] = got.attachments
    assert attachment.path is None
    assert attachment.error is not None and "files:read" in attachment.error
    assert list((tmp_path / "workspace").rglob("*notes*")) == []


@run
async def test_the_bot_token_is_never_sent_to_a_file_link_outside_slack(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, _channel, inbox):
        file = slack.add_file(b"data")
        file["url_private"] = file["url_private_download"] = "http://evil.example/steal"
        await slack.push_event(slack.file_share("", [file]))
        [got] = await inbox.wait()
    assert got.attachments[0].error is not None
    assert got.attachments[0].path is None


@run
async def test_a_file_link_redirecting_off_slack_gets_no_token(tmp_path: Path) -> None:
    from aiohttp import web

    seen: list[str | None] = []

    async def elsewhere(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.Response(body=b"from elsewhere", content_type="text/plain")

    app = web.Application()
    app.router.add_get("/{tail:.*}", elsewhere)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.2", 0)  # another host than the fake Slack's 127.0.0.1
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with running(tmp_path) as (slack, _channel, inbox):
            slack.files_redirect = f"http://127.0.0.2:{port}"
            await slack.push_event(slack.file_share("", [slack.add_file(b"data")]))
            await inbox.wait()
    finally:
        await runner.cleanup()
    assert seen == [None]  # the redirect was followed, without the bot token


# -- sending -----------------------------------------------------------------------------------


@run
async def test_a_reply_is_posted_as_mrkdwn_in_its_thread(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, channel, _inbox):
        sent = await channel.send(
            OutboundMessage("slack", "C0GEN", "**Done**: see [docs](https://x.y)", "1.000001")
        )
    [call] = slack.calls_to("chat.postMessage")
    assert call.params["text"] == "*Done*: see <https://x.y|docs>"
    assert call.params["thread_ts"] == "1.000001"
    assert call.token == slack.bot_token
    assert [s.message_id for s in sent] == [slack.posted[0]["ts"]]


@run
async def test_a_long_reply_is_split_into_messages_that_fit(tmp_path: Path) -> None:
    paragraphs = [f"Paragraph {i}: " + "word " * 150 for i in range(12)]
    code = "```\n" + "\n".join(f"line {i} = {i * 2}" for i in range(400)) + "\n```"
    text = "\n\n".join([*paragraphs, code])
    async with running(tmp_path) as (slack, channel, _inbox):
        sent = await channel.send(OutboundMessage("slack", "D0DM", text))
    posts = [c.params["text"] for c in slack.calls_to("chat.postMessage")]
    assert len(sent) == len(posts) > 2
    assert all(len(p) <= channel.max_message_chars for p in posts)
    assert all(p.count("```") % 2 == 0 for p in posts)  # every code block closed in its message
    assert "line 399 = 798" in posts[-1]


@run
async def test_an_edit_updates_the_message_with_mrkdwn(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, channel, _inbox):
        [sent] = await channel.send(OutboundMessage("slack", "D0DM", "Thinking"))
        await channel.edit(sent, "## Answer\n\n**42** & more")
    [call] = slack.calls_to("chat.update")
    assert call.params["ts"] == sent.message_id
    assert call.params["text"] == "*Answer*\n\n*42* &amp; more"
    assert slack.posted[0]["edits"] == 1


@run
async def test_a_piece_cut_to_the_message_size_stays_one_message_after_escaping(
    tmp_path: Path,
) -> None:
    text = "a & b " * 650  # 3,900 characters of Markdown, 5,200 of mrkdwn
    async with running(tmp_path) as (slack, channel, _inbox):
        sent = await channel.send(OutboundMessage("slack", "D0DM", text))
    assert len(sent) == 1
    assert slack.posted[0]["text"] == text.strip().replace("&", "&amp;")


@run
async def test_an_edit_a_little_over_the_split_size_is_shown_whole(tmp_path: Path) -> None:
    # The gateway splits Markdown at max_message_chars; escaping can make the mrkdwn longer.
    text = "a & b " * 650  # 3,900 characters of Markdown, 5,200 of mrkdwn
    async with running(tmp_path) as (slack, channel, _inbox):
        [sent] = await channel.send(OutboundMessage("slack", "D0DM", "…"))
        await channel.edit(sent, text)
    [call] = slack.calls_to("chat.update")
    assert call.params["text"] == text.strip().replace("&", "&amp;")


@run
async def test_a_rate_limited_post_waits_retry_after_then_posts_once(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, channel, _inbox):
        slack.rate_limit("chat.postMessage", retry_after=1)
        await channel.send(OutboundMessage("slack", "D0DM", "hello"))
    first, second = slack.calls_to("chat.postMessage")
    assert second.at - first.at >= 1.0
    assert len(slack.posted) == 1


@run
async def test_a_timed_out_post_is_not_sent_twice(tmp_path: Path) -> None:
    async with running(tmp_path, timeout_s=0.3) as (slack, channel, _inbox):
        slack.delay("chat.postMessage", 1.0)
        with pytest.raises(ChannelError, match="not retried"):
            await channel.send(OutboundMessage("slack", "D0DM", "important"))
        await slack.wait_for(lambda: "chat.postMessage" in slack.answered)
    assert len(slack.calls_to("chat.postMessage")) == 1


@run
async def test_a_post_whose_connection_dropped_is_not_sent_twice(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, channel, _inbox):
        slack.cut_connection("chat.postMessage")
        with pytest.raises(ChannelError):
            await channel.send(OutboundMessage("slack", "D0DM", "important"))
    assert len(slack.calls_to("chat.postMessage")) == 1


@run
async def test_a_refused_post_raises_advice(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, channel, _inbox):
        slack.fail("chat.postMessage", "not_in_channel")
        with pytest.raises(ChannelError, match="invite"):
            await channel.send(OutboundMessage("slack", "C0OTHER", "hi"))


@run
async def test_typing_posts_nothing(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, channel, _inbox):
        before = len(slack.calls)
        await channel.typing("D0DM")
    assert len(slack.calls) == before


# -- connection --------------------------------------------------------------------------------


@run
async def test_a_bad_bot_token_stops_start_with_advice(tmp_path: Path) -> None:
    async with FakeSlack() as slack:
        config = slack_config(slack, bot_token=SecretStr("xoxb-wrong"))
        channel = SlackChannel(config, inbox=FileInbox(tmp_path), state_dir=tmp_path)
        with pytest.raises(ChannelError, match="PINCH_SLACK__BOT_TOKEN"):
            await channel.start(Inbox())
        await channel.stop()


@run
async def test_a_bot_token_given_as_app_token_stops_start_with_advice(tmp_path: Path) -> None:
    async with FakeSlack() as slack:
        config = slack_config(slack, app_token=SecretStr(slack.bot_token))
        channel = SlackChannel(config, inbox=FileInbox(tmp_path), state_dir=tmp_path)
        with pytest.raises(ChannelError, match="xapp-"):
            await channel.start(Inbox())
        await channel.stop()
        assert slack.sockets_opened == 0


@run
async def test_a_dropped_socket_reconnects_without_leaking_sockets(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, _channel, inbox):
        for drop in range(1, 5):
            await slack.drop_sockets()
            await slack.wait_connected(sockets_opened=1 + drop)
            assert slack.open_sockets <= 1
        await slack.push_event(slack.dm("still here"))
        await inbox.wait()
        assert slack.open_sockets == 1


@run
async def test_a_disconnect_envelope_moves_to_a_new_socket(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, _channel, inbox):
        for n in range(1, 4):
            await slack.send_disconnect()
            await slack.wait_connected(sockets_opened=1 + n)
            await slack.wait_for(lambda: slack.open_sockets == 1)
        await slack.push_event(slack.dm("after refresh"))
        await inbox.wait()
        assert slack.open_sockets == 1
        assert len(slack.calls_to("apps.connections.open")) >= 4


@run
async def test_a_storm_of_disconnects_and_drops_ends_with_one_socket(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, _channel, inbox):
        for round_ in range(5):
            await slack.send_disconnect()
            await slack.drop_sockets()  # Slack's refresh: a warning, then the close
            await slack.wait_connected(sockets_opened=2 + round_)
        await slack.push_event(slack.dm("calm again"))
        await inbox.wait()
        await slack.wait_for(lambda: slack.open_sockets == 1)
        opened = slack.sockets_opened
        # Stable: no reconnect loop left running.
        await slack.push_event(slack.dm("still calm"))
        await inbox.wait(2)
        assert slack.sockets_opened == opened
        assert slack.open_sockets == 1


def test_overlapping_forced_reconnects_on_a_slow_network_leave_one_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK gives up waiting for its reconnect lock after 5 s and connects anyway; shorten
    # that wait (only inside slack_sdk's Socket Mode client) to keep the test fast.
    shim = types.ModuleType("asyncio_for_slack_sdk")
    shim.__dict__.update(asyncio.__dict__)
    shim.wait_for = lambda aw, timeout: asyncio.wait_for(aw, 0.3)  # type: ignore[attr-defined]
    monkeypatch.setattr(slack_sdk.socket_mode.async_client, "asyncio", shim)

    @run
    async def scenario() -> None:
        async with running(tmp_path) as (slack, channel, _inbox):
            assert channel._handler is not None
            client = channel._handler.client
            reconnect = client.connect_to_new_endpoint
            handled = asyncio.Semaphore(0)

            async def counted(force: bool = False) -> None:
                try:
                    await reconnect(force)
                finally:
                    handled.release()

            client.connect_to_new_endpoint = counted  # type: ignore[method-assign]
            slack.delay("apps.connections.open", 0.3)
            slack.delay("apps.connections.open", 0.3)
            slack.handshake_delay_s = 1.0
            await slack.send_disconnect()  # reconnect 1 holds the lock, slowly
            await slack.send_disconnect()  # reconnect 2 arrives on the old socket meanwhile
            for _ in range(2):
                await asyncio.wait_for(handled.acquire(), 10)
            assert slack.open_sockets == 1

    scenario()


@run
async def test_a_silently_cut_socket_is_replaced(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, _channel, inbox):
        slack.abort_sockets()
        await slack.wait_connected(sockets_opened=2)
        await slack.push_event(slack.dm("back"))
        await inbox.wait()
        assert slack.open_sockets == 1


@run
async def test_a_socket_that_stops_answering_pings_is_replaced_not_leaked(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, _channel, inbox):
        slack.ponging = False
        await slack.wait_for(lambda: slack.sockets_opened >= 2)
        slack.ponging = True
        await slack.wait_connected(sockets_opened=2)
        await slack.push_event(slack.dm("alive"))
        await inbox.wait()
        await slack.wait_for(lambda: slack.open_sockets == 1)


@run
async def test_stop_closes_the_socket(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, channel, _inbox):
        await channel.stop()
        await slack.wait_for(lambda: slack.open_sockets == 0)


@run
async def test_check_reports_identity_and_socket_state(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, channel, _inbox):
        health = await channel.check()
        assert health.ok
        assert "@pinch" in health.detail and "Socket Mode connected" in health.detail
        slack.fail("auth.test", "invalid_auth")
        health = await channel.check()
        assert not health.ok
        assert "PINCH_SLACK__BOT_TOKEN" in health.detail
        assert slack.bot_token not in health.detail


@run
async def test_check_reports_a_lost_socket_until_it_is_back(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, channel, _inbox):
        slack.fail("apps.connections.open", "internal_error", times=1000)
        await slack.drop_sockets()
        await slack.wait_for(lambda: len(slack.calls_to("apps.connections.open")) >= 2)
        health = await channel.check()
        assert not health.ok
        assert "reconnecting" in health.detail
        slack.answer_normally()
        await slack.wait_connected(sockets_opened=2)
        await slack.wait_for(lambda: slack.open_sockets == 1)
        assert (await channel.check()).ok


@run
async def test_check_names_missing_scopes(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, channel, _inbox):
        slack.scopes.remove("files:read")
        health = await channel.check()
        assert health.ok  # files are a nicety
        assert "missing scopes files:read" in health.detail
        slack.scopes.remove("im:history")
        health = await channel.check()
        assert not health.ok  # without it no direct message arrives
        assert "im:history" in health.detail and "reinstall" in health.detail


def test_the_readme_manifest_asks_for_exactly_the_scopes_checked() -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Run it on Slack", 1)[1].split("settings:", 1)[0]
    listed = re.findall(r"^\s+- ([a-z_]+:[a-z_]+)$", block.split("bot:", 1)[1], re.MULTILINE)
    assert sorted(listed) == sorted(SCOPES)


@run
async def test_check_works_without_start_and_leaves_nothing_open(tmp_path: Path) -> None:
    async with FakeSlack() as slack:
        channel = SlackChannel(slack_config(slack), inbox=FileInbox(tmp_path), state_dir=tmp_path)
        health = await channel.check()
        assert health.ok and "@pinch" in health.detail
        assert channel._session is None


@run
async def test_check_without_a_token_says_which_variable_to_set(tmp_path: Path) -> None:
    channel = SlackChannel(SlackConfig(), inbox=FileInbox(tmp_path), state_dir=tmp_path)
    health = await channel.check()
    assert not health.ok
    assert "PINCH_SLACK__BOT_TOKEN" in health.detail


# -- Events API mode ---------------------------------------------------------------------------

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def signed(body: str, secret: str = SIGNING_SECRET, **headers: str) -> dict[str, str]:
    stamp = str(int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{stamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={digest}",
        **headers,
    }


def callback(event: dict[str, Any], event_id: str = "Ev1") -> str:
    return json.dumps(
        {
            "token": "t",
            "team_id": "T0FAKE",
            "type": "event_callback",
            "event": event,
            "event_id": event_id,
        }
    )


@contextlib.asynccontextmanager
async def events_mode(tmp_path: Path) -> AsyncIterator[tuple[FakeSlack, str, Inbox]]:
    port = free_port()
    async with FakeSlack() as slack:
        config = slack_config(
            slack,
            mode="events",
            app_token=None,
            signing_secret=SecretStr(SIGNING_SECRET),
            events_port=port,
        )
        channel = SlackChannel(config, inbox=FileInbox(tmp_path), state_dir=tmp_path)
        inbox = Inbox()
        await channel.start(inbox)
        try:
            yield slack, f"http://127.0.0.1:{port}/slack/events", inbox
        finally:
            await channel.stop()


@run
async def test_events_mode_accepts_a_signed_event(tmp_path: Path) -> None:
    async with events_mode(tmp_path) as (slack, url, inbox), aiohttp.ClientSession() as http:
        body = callback(slack.dm("over http"))
        async with http.post(url, data=body, headers=signed(body)) as resp:
            assert resp.status == 200
        [got] = await inbox.wait()
    assert got.text == "over http"


@run
async def test_events_mode_rejects_a_bad_signature(tmp_path: Path) -> None:
    async with events_mode(tmp_path) as (slack, url, inbox), aiohttp.ClientSession() as http:
        body = callback(slack.dm("forged"))
        async with http.post(url, data=body, headers=signed(body, secret="wrong")) as resp:
            assert resp.status == 401
        body2 = callback(slack.dm("real"), "Ev2")
        async with http.post(url, data=body2, headers=signed(body2)) as resp:
            assert resp.status == 200
        [got] = await inbox.wait()
    assert got.text == "real"


@run
async def test_events_mode_delivers_a_retry_once(tmp_path: Path) -> None:
    async with events_mode(tmp_path) as (slack, url, inbox), aiohttp.ClientSession() as http:
        body = callback(slack.dm("retried"))
        retry = {"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
        for _ in range(2):
            async with http.post(url, data=body, headers=signed(body, **retry)) as resp:
                assert resp.status == 200
        await inbox.wait()
        await asyncio.sleep(0)
    assert [m.text for m in inbox.messages] == ["retried"]


@run
async def test_events_mode_answers_the_url_verification_challenge(tmp_path: Path) -> None:
    async with events_mode(tmp_path) as (_slack, url, _inbox), aiohttp.ClientSession() as http:
        body = json.dumps({"token": "t", "challenge": "abc123", "type": "url_verification"})
        async with http.post(url, data=body, headers=signed(body)) as resp:
            assert resp.status == 200
            assert "abc123" in await resp.text()
