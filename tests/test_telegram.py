"""The Telegram adapter against a fake Bot API server: receiving (polling, offsets, de-dup,
groups, topics), sending (HTML, plain-text retry, splitting, 429, topics) and polling health."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from channels.base import ChannelError, OutboundMessage
from channels.channel_config import TelegramConfig
from channels.telegram.adapter import TelegramChannel
from channels.telegram.token_lock import TokenLock
from memory.files.inbox import Inbox as FileInbox
from tests.fakes.telegram_server import (
    BOT_USERNAME,
    FORUM,
    GROUP,
    OWNER,
    STRANGER,
    FakeTelegram,
)
from tests.telegram_support import Inbox, make_channel, running, until


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram() as server:
        yield server


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


# -- receiving


def test_private_message_reaches_the_gateway_as_a_direct_message(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            update = tg.private_text("hello there")
            tg.push(update)
            [message] = await inbox.wait_for(1)
        chat_id = update["message"]["chat"]["id"]
        assert message.channel == "telegram"
        assert message.text == "hello there"
        assert message.sender_id == str(OWNER["id"])
        assert message.chat_type == "direct"
        assert message.mentioned is True
        assert message.dedup_key == f"{chat_id}:{update['message']['message_id']}"
        assert message.sender_name == "Olive"
        assert message.thread_id is None

    run(scenario())


def test_start_sets_the_command_menu_and_clears_a_stale_webhook(tg, tmp_path):
    tg.webhook = {"url": "https://old.example/hook", "secret_token": None}

    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            tg.push(tg.private_text("hi"))
            await inbox.wait_for(1)
        [commands] = tg.calls_to("setMyCommands")
        names = [c["command"] for c in commands.params["commands"]]
        assert names == ["new", "reset", "status", "context", "project", "help"]
        [clear] = tg.calls_to("deleteWebhook")
        assert not clear.params.get("drop_pending_updates")

    run(scenario())


def test_backlog_after_downtime_is_processed_by_default(tg, tmp_path):
    tg.push(tg.private_text("sent while Pinch was down"))

    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            [message] = await inbox.wait_for(1)
        assert message.text == "sent while Pinch was down"

    run(scenario())


def test_backlog_is_dropped_only_when_drop_pending_updates_is_set(tg, tmp_path):
    tg.push(tg.private_text("old"))

    async def scenario():
        async with running(tg, tmp_path, drop_pending_updates=True) as (_, inbox):
            await until(lambda: len(tg.calls_to("getUpdates")) >= 1)
            tg.push(tg.private_text("new"))
            messages = await inbox.wait_for(1)
        assert [m.text for m in messages] == ["new"]
        assert tg.calls_to("deleteWebhook")[0].params["drop_pending_updates"] is True

    run(scenario())


def test_offset_is_confirmed_only_after_the_gateway_took_the_message(tg, tmp_path):
    update = tg.private_text("keep me")
    tg.push(update)
    inbox = Inbox()

    async def scenario():
        inbox.hold = asyncio.Event()
        async with running(tg, tmp_path, inbox) as _:
            await until(lambda: inbox.calls == 1)
            await asyncio.sleep(0.1)  # the adapter must not poll on while the handler runs
            assert tg.confirmed_offset <= update["update_id"]
            assert tg.pending_update_ids() == [update["update_id"]]
            inbox.hold.set()
            await until(lambda: tg.confirmed_offset == update["update_id"] + 1)

    run(scenario())


def test_a_failed_hand_over_fetches_the_update_again_instead_of_losing_it(tg, tmp_path):
    inbox = Inbox()
    inbox.fail_next = 1
    tg.push(tg.private_text("important"))

    async def scenario():
        async with running(tg, tmp_path, inbox):
            messages = await inbox.wait_for(1)
        assert [m.text for m in messages] == ["important"]
        assert inbox.calls == 2

    run(scenario())


def test_an_update_delivered_twice_is_handed_over_once(tg, tmp_path):
    update = tg.private_text("only once")
    tg.push(update, dict(update))

    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            tg.push(tg.private_text("next"))
            messages = await inbox.wait_for(2)
        assert [m.text for m in messages] == ["only once", "next"]

    run(scenario())


def test_stop_tells_telegram_what_was_handled_so_a_restart_does_not_fetch_it_again(tg, tmp_path):
    update = tg.private_text("handled")
    tg.push(update)

    async def scenario():
        async with running(tg, tmp_path, poll_timeout_s=5) as (_, inbox):
            await inbox.wait_for(1)
        assert tg.confirmed_offset == update["update_id"] + 1
        assert tg.pending_update_ids() == []

    run(scenario())


def test_malformed_and_unknown_updates_are_skipped_with_one_log_line(tg, tmp_path, caplog):
    broken = {"update_id": 1, "message": {"message_id": 5, "text": "no chat, no date"}}
    unknown = {"update_id": 2, "callback_query": {"id": "9", "from": OWNER, "chat_instance": "x"}}
    tg.push(broken, unknown, {"update_id": 3, "message": "not an object"})

    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            tg.push(tg.private_text("still alive"))
            messages = await inbox.wait_for(1)
        assert [m.text for m in messages] == ["still alive"]

    with caplog.at_level(logging.INFO, logger="channels.telegram.adapter"):
        run(scenario())
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 3
    assert all("\n" not in line for line in skipped)


# -- groups and topics


def test_group_message_without_a_mention_is_not_addressed_to_the_bot(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            tg.push(tg.group_text("just chatting", sender=STRANGER))
            [message] = await inbox.wait_for(1)
        assert message.chat_type == "group"
        assert message.chat_id == str(GROUP["id"])
        assert message.sender_id == str(STRANGER["id"])
        assert message.mentioned is False

    run(scenario())


def test_at_mention_addresses_the_bot_and_is_removed_from_the_text(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            tg.push(tg.group_text(f"hey @{BOT_USERNAME} what's up"))
            tg.push(tg.group_text(f"@{BOT_USERNAME.upper()}, status?"))
            middle, leading = await inbox.wait_for(2)
        assert middle.mentioned is True
        assert middle.text == "hey what's up"
        assert (leading.mentioned, leading.text) == (True, "status?")

    run(scenario())


def test_command_addressed_to_the_bot_in_a_group_reads_as_the_plain_command(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            tg.push(tg.group_text(f"/new@{BOT_USERNAME}"), tg.group_text("/new@other_bot"))
            mine, other = await inbox.wait_for(2)
        assert (mine.text, mine.mentioned) == ("/new", True)
        assert (other.text, other.mentioned) == ("/new@other_bot", False)

    run(scenario())


def test_reply_to_the_bot_and_text_mention_address_it(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (channel, inbox):
            await channel.send(OutboundMessage("telegram", str(GROUP["id"]), "I said this"))
            tg.push(tg.reply_to_bot("and I answer", tg.sent[-1]))
            entity = {"type": "text_mention", "offset": 0, "length": 5, "user": tg.bot_user()}
            tg.push(tg.update(tg.message("Pinch, look", chat=GROUP, entities=[entity])))
            reply, named = await inbox.wait_for(2)
        assert reply.mentioned is True
        assert reply.reply_to_id == str(tg.sent[-1].message_id)
        assert named.mentioned is True

    run(scenario())


def test_forum_topics_are_threads_and_the_topic_service_message_is_no_reply(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            tg.push(tg.topic_text("in a topic", thread_id=7))
            tg.push(tg.general_topic_text("in General"))
            topic, general = await inbox.wait_for(2)
        assert topic.thread_id == "7"
        assert topic.chat_id == str(FORUM["id"])
        assert topic.reply_to_id is None
        assert topic.mentioned is False
        assert general.thread_id == "1"

    run(scenario())


# -- sending


def test_reply_is_sent_as_telegram_html(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (channel, _):
            sent = await channel.send(
                OutboundMessage("telegram", "111", "**Done** — see `a < b` & [docs](https://x.y)")
            )
        [message] = tg.sent
        assert message.parse_mode == "HTML"
        assert message.raw == (
            '<b>Done</b> — see <code>a &lt; b</code> &amp; <a href="https://x.y">docs</a>'
        )
        assert sent[0].message_id == str(message.message_id)
        assert sent[0].chat_id == "111"

    run(scenario())


def test_formatting_refused_by_telegram_is_resent_as_plain_text_from_the_source(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (channel, _):
            text = "**Bold** REFUSE_HTML `code` and [a link](https://x.y)"
            await channel.send(OutboundMessage("telegram", "111", text))
        [message] = tg.sent
        assert message.parse_mode is None
        assert message.raw == "Bold REFUSE_HTML code and a link (https://x.y)"
        refused = tg.calls_to("sendMessage")[0]
        assert refused.params["parse_mode"] == "HTML"

    run(scenario())


def test_edit_refused_for_formatting_is_retried_as_plain_text(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (channel, _):
            [sent] = await channel.send(OutboundMessage("telegram", "111", "draft"))
            await channel.edit(sent, "*final* REFUSE_HTML <tag>")
        assert tg.sent[0].raw == "final REFUSE_HTML <tag>"
        assert tg.sent[0].parse_mode is None

    run(scenario())


def test_editing_to_the_same_text_is_not_an_error(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (channel, _):
            [sent] = await channel.send(OutboundMessage("telegram", "111", "**same**"))
            await channel.edit(sent, "**same**")
            await channel.edit(sent, "**changed**")
        assert tg.sent[0].text == "changed"
        assert tg.sent[0].edits == 1

    run(scenario())


def test_long_reply_is_split_between_code_fences_and_every_part_is_accepted(tg, tmp_path):
    code = "```python\n" + "\n".join(f"x{i} = {i}  # < & >" for i in range(300)) + "\n```"
    text = "Intro paragraph.\n\n" + code + "\n\nClosing words."

    async def scenario():
        async with running(tg, tmp_path) as (channel, _):
            sent = await channel.send(OutboundMessage("telegram", "111", text))
        assert len(sent) == len(tg.sent) >= 3
        assert all(m.parse_mode == "HTML" for m in tg.sent)  # every part parsed as HTML
        assert all(len(m.raw) <= 4096 for m in tg.sent)
        assert tg.sent[0].text.startswith("Intro paragraph.")
        assert tg.sent[-1].text.endswith("Closing words.")
        shown = "\n".join(m.text for m in tg.sent)
        assert all(f"x{i} = {i}  # < & >" in shown for i in range(300))

    run(scenario())


def test_rate_limit_is_honoured_with_retry_after(tg, tmp_path):
    tg.fail_next("sendMessage", 429, retry_after=1)

    async def scenario():
        async with running(tg, tmp_path) as (channel, _):
            started = time.monotonic()
            await channel.send(OutboundMessage("telegram", "111", "after the wait"))
            waited = time.monotonic() - started
        assert waited >= 1.0
        assert [m.text for m in tg.sent] == ["after the wait"]

    run(scenario())


def test_general_topic_is_sent_to_without_thread_id_but_typing_keeps_it(tg, tmp_path):
    forum = str(FORUM["id"])

    async def scenario():
        async with running(tg, tmp_path) as (channel, _):
            await channel.send(OutboundMessage("telegram", forum, "to General", thread_id="1"))
            await channel.send(OutboundMessage("telegram", forum, "to topic 7", thread_id="7"))
            await channel.typing(forum, "1")
        general, topic = tg.calls_to("sendMessage")
        assert "message_thread_id" not in general.params
        assert topic.params["message_thread_id"] == 7
        [typing] = tg.calls_to("sendChatAction")
        assert typing.params["message_thread_id"] == 1
        assert typing.params["action"] == "typing"

    run(scenario())


def test_reply_to_a_message_uses_reply_parameters_on_the_first_part_only(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (channel, _):
            text = "a" * 3000 + "\n\n" + "b" * 3000
            await channel.send(OutboundMessage("telegram", "111", text, reply_to_id="55"))
        first, second = tg.calls_to("sendMessage")
        assert first.params["reply_parameters"] == {
            "message_id": 55,
            "allow_sending_without_reply": True,
        }
        assert "reply_parameters" not in second.params

    run(scenario())


def test_a_send_telegram_refuses_raises_advice(tg, tmp_path):
    tg.fail_next("sendMessage", 403, description="Forbidden: bot was blocked by the user")

    async def scenario():
        async with running(tg, tmp_path) as (channel, _):
            with pytest.raises(ChannelError, match="blocked the bot"):
                await channel.send(OutboundMessage("telegram", "111", "hello?"))

    run(scenario())


# -- polling health


async def stall_the_next_poll(tg: FakeTelegram) -> None:
    """Make the next getUpdates hang forever, and wait until it is hanging."""
    await until(lambda: len(tg.calls_to("getUpdates")) >= 1)
    tg.stall_next("getUpdates")
    calls = len(tg.calls_to("getUpdates"))
    tg.end_long_polls()
    await until(lambda: len(tg.calls_to("getUpdates")) > calls)


def test_a_stalled_poll_is_rebuilt_and_messages_arrive_again(tg, tmp_path, caplog):
    async def scenario():
        async with running(tg, tmp_path, poll_stall_s=1.5) as (channel, inbox):
            await stall_the_next_poll(tg)
            # Sending while deaf works (separate pool) and doesn't fool the watchdog.
            await channel.send(OutboundMessage("telegram", "111", "still talking"))
            tg.push(tg.private_text("can you hear me?"))
            [message] = await inbox.wait_for(1, timeout=5)
            health = await channel.check()
        assert message.text == "can you hear me?"
        assert "polling rebuilt 1 times" in health.detail

    with caplog.at_level(logging.WARNING, logger="channels.telegram.adapter"):
        run(scenario())
    assert any("polling stalled" in r.getMessage() for r in caplog.records)


def test_sends_are_not_starved_by_a_hanging_poll(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (channel, _):
            await stall_the_next_poll(tg)
            started = time.monotonic()
            for n in range(5):
                await channel.send(OutboundMessage("telegram", "111", f"message {n}"))
            assert time.monotonic() - started < 2

    run(scenario())


def test_conflict_409_is_logged_once_and_polling_recovers_without_dropping_the_backlog(
    tg, tmp_path, caplog
):
    tg.fail_next("getUpdates", 409, n=2)
    tg.push(tg.private_text("waiting in the backlog"))

    async def scenario():
        async with running(tg, tmp_path) as (channel, inbox):
            [message] = await inbox.wait_for(1)
            health = await channel.check()
        assert message.text == "waiting in the backlog"
        clears = tg.calls_to("deleteWebhook")
        assert len(clears) == 3  # at start, then again after each conflict
        assert not any(c.params.get("drop_pending_updates") for c in clears)
        assert "409 Conflict" in health.detail

    with caplog.at_level(logging.INFO, logger="channels.telegram.adapter"):
        run(scenario())
    lines = [r.getMessage() for r in caplog.records if "409" in r.getMessage()]
    assert len(lines) == 2
    assert any("recovered after 2 failed attempts" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("failure", ["disconnect", "500"])
def test_network_loss_and_server_errors_are_retried_with_backoff(tg, tmp_path, failure):
    if failure == "disconnect":
        tg.disconnect_next("getUpdates", 2)
    else:
        tg.fail_next("getUpdates", 500, n=2)
    tg.push(tg.private_text("eventually"))

    async def scenario():
        async with running(tg, tmp_path) as (_, inbox):
            [message] = await inbox.wait_for(1)
        assert message.text == "eventually"

    run(scenario())


def test_a_second_poller_on_the_same_token_is_refused(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path):
            second = make_channel(tg, tmp_path)
            with pytest.raises(ChannelError, match="already receiving"):
                await second.start(Inbox())
        third = make_channel(tg, tmp_path)  # the first one stopped: the lock is free
        await third.start(Inbox())
        await third.stop()

    run(scenario())


HOLD_LOCK = """
import fcntl, os, sys
path = sys.argv[1]
os.makedirs(os.path.dirname(path), exist_ok=True)
f = open(path, "a+")
fcntl.flock(f, fcntl.LOCK_EX)
f.write("4242")
f.flush()
print("locked", flush=True)
sys.stdin.read()
"""


def test_the_lock_holds_across_processes_and_is_not_named_after_the_token(tg, tmp_path):
    lock_path = TokenLock(tmp_path / "state", tg.token).path
    assert tg.token not in lock_path.name
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            HOLD_LOCK,
            str(lock_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"

        async def scenario():
            with pytest.raises(ChannelError, match="pid 4242"):
                await make_channel(tg, tmp_path).start(Inbox())

        run(scenario())
    finally:
        holder.communicate("")


def test_check_reports_the_bot_and_the_last_completed_poll(tg, tmp_path):
    async def scenario():
        idle = await make_channel(tg, tmp_path).check()  # `pinch doctor` without polling
        async with running(tg, tmp_path) as (channel, _):
            await until(lambda: len(tg.calls_to("getUpdates")) >= 1)
            tg.end_long_polls()
            await until(lambda: len(tg.calls_to("getUpdates")) >= 2)
            live = await channel.check()
        assert idle.ok and idle.detail == f"connected as @{BOT_USERNAME}"
        assert live.ok
        assert "last poll" in live.detail

    run(scenario())


def test_check_reports_a_poller_that_stopped_receiving(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path, poll_stall_s=1.5) as (channel, _):
            await until(lambda: len(tg.calls_to("getUpdates")) >= 1)
            tg.fail_next("getUpdates", 500, n=1000)
            tg.end_long_polls()
            deadline = time.monotonic() + 5
            health = await channel.check()
            while health.ok and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                health = await channel.check()
        assert not health.ok
        assert "last error" in health.detail

    run(scenario())


def test_a_refused_token_stops_start_with_advice(tg, tmp_path):
    async def scenario():
        channel = make_channel(tg, tmp_path, bot_token="999:wrong")
        with pytest.raises(ChannelError, match="PINCH_TELEGRAM__BOT_TOKEN"):
            await channel.start(Inbox())
        await channel.stop()

    run(scenario())


def test_the_token_never_reaches_the_logs(tg, tmp_path, caplog):
    async def scenario():
        async with running(tg, tmp_path) as (channel, inbox):
            tg.push(tg.private_text("hi"))
            await inbox.wait_for(1)
            await channel.send(OutboundMessage("telegram", "111", "hello"))
            tg.fail_next("getUpdates", 409)
            tg.end_long_polls()
            await until(lambda: len(tg.calls_to("deleteWebhook")) >= 2)

    with caplog.at_level(logging.DEBUG):
        run(scenario())
    assert caplog.records
    assert tg.token not in caplog.text
    assert tg.token.split(":")[1] not in caplog.text


def test_missing_token_is_refused_with_the_variable_to_set(tmp_path):
    with pytest.raises(ChannelError, match="PINCH_TELEGRAM__BOT_TOKEN"):
        TelegramChannel(TelegramConfig(), inbox=FileInbox(tmp_path), state_dir=tmp_path)


def test_typing_is_one_action_per_call_and_never_repeats_by_itself(tg, tmp_path):
    async def scenario():
        async with running(tg, tmp_path) as (channel, _):
            await channel.typing("111")
            await asyncio.sleep(0.3)  # nothing in the adapter keeps it going
            tg.fail_next("sendChatAction", 400, description="Bad Request: chat not found")
            await channel.typing("999")  # a failure is logged, never raised into the turn
        assert [c.params["chat_id"] for c in tg.calls_to("sendChatAction")] == ["111", "999"]

    run(scenario())


def test_stop_lets_a_hand_over_in_progress_finish_and_confirms_it(tg, tmp_path):
    inbox = Inbox()
    update = tg.private_text("in flight")
    tg.push(update)

    async def scenario():
        inbox.hold = asyncio.Event()
        channel = make_channel(tg, tmp_path)
        await channel.start(inbox)
        await until(lambda: inbox.calls == 1)
        stopping = asyncio.create_task(channel.stop())
        await asyncio.sleep(0.1)  # stop is waiting for the handler, not cancelling it
        inbox.hold.set()
        await stopping
        assert [m.text for m in inbox.messages] == ["in flight"]
        assert tg.confirmed_offset == update["update_id"] + 1

    run(scenario())
