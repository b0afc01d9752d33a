"""Messages with nothing to answer: a whitespace-only message costs no model call and gets no
reply, like an empty one; a sticker or a location gets a polite answer without the model. Real
adapters (python-telegram-bot, slack-sdk) against the fake platform servers."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.channel_registry import Owners
from memory.files.inbox import Inbox as FileInbox
from tests.agent_support import responder
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.gateway_support import Rig, make_rig
from tests.telegram_support import make_channel, telegram_config, until

OWNER_CHAT = 111


def echo(request: RecordedRequest) -> Reply:
    return text_reply(f"re: {request.last_user_text()}")


def telegram_rig(tmp_path: Path, server: FakeModelServer, tg: FakeTelegram) -> Rig:
    rig = make_rig(tmp_path, server, telegram=telegram_config(tg))
    rig.gateway.channels["telegram"] = make_channel(tg, tmp_path)
    del rig.gateway.channels["slack"]
    return rig


def bot_texts(tg: FakeTelegram) -> list[str]:
    return [m.text for m in tg.sent if m.chat_id == OWNER_CHAT]


async def settle(rig: Rig) -> None:
    """Give the adapter time to fetch and hand over what was pushed, then let turns finish."""
    await asyncio.sleep(1.0)
    await rig.gateway.idle()


def last_roles(request: RecordedRequest) -> list[str]:
    return [m["role"] for m in request.body["messages"]]


def test_a_whitespace_only_telegram_message_costs_no_model_call_and_no_reply(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server, FakeTelegram() as tg:
            server.respond_with(responder(turn=echo))
            rig = telegram_rig(tmp_path, server, tg)
            await rig.gateway.start()
            tg.push(tg.private_text("hello"))
            await until(lambda: len(bot_texts(tg)) == 1, what="the first answer", timeout=30)
            await rig.gateway.idle()
            tg.push(tg.private_text("   "))
            await settle(rig)
            turns_after_blank = len(server.requests)
            tg.push(tg.private_text("and now?"))
            await until(lambda: len(bot_texts(tg)) == 2, what="the second answer", timeout=30)
            await rig.gateway.idle()
            await rig.close()
            assert turns_after_blank == 1
            assert bot_texts(tg) == ["re: hello", "re: and now?"]
            assert last_roles(server.requests[-1])[-1] == "user"

    asyncio.run(scenario())


def test_a_whitespace_only_slack_message_costs_no_model_call_and_no_reply(tmp_path: Path) -> None:
    from channels.slack.adapter import SlackChannel
    from tests.test_slack import slack_config

    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            async with FakeSlack() as slack:
                rig = make_rig(tmp_path, server)
                access = rig.gateway.access
                access.owners = Owners.of({**access.owners.ids, "slack": ["U0OWNER"]})
                rig.gateway.channels["slack"] = SlackChannel(
                    slack_config(slack),
                    inbox=FileInbox(tmp_path / "workspace"),
                    state_dir=tmp_path / "state",
                )
                await rig.gateway.start()
                await slack.wait_connected()
                await slack.push_event(slack.dm("hello"))
                await until(lambda: len(slack.posted) == 1, what="the first answer", timeout=30)
                await rig.gateway.idle()
                await slack.push_event(slack.dm(" \n  "))
                await settle(rig)
                turns_after_blank = len(server.requests)
                posted_after_blank = len(slack.posted)
                await rig.close()
            assert turns_after_blank == 1 and posted_after_blank == 1

    asyncio.run(scenario())


def test_a_sticker_gets_a_polite_answer_without_the_model(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server, FakeTelegram() as tg:
            server.respond_with(responder(turn=echo))
            rig = telegram_rig(tmp_path, server, tg)
            await rig.gateway.start()
            tg.push(tg.sticker())
            await until(
                lambda: len(bot_texts(tg)) == 1, what="the answer to the sticker", timeout=30
            )
            tg.push(tg.location())
            await until(
                lambda: len(bot_texts(tg)) == 2, what="the answer to the location", timeout=30
            )
            await settle(rig)
            await rig.close()
            assert server.requests == []
            assert all("can't read" in text for text in bot_texts(tg))

    asyncio.run(scenario())
