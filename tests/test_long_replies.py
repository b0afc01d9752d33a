"""Long streamed replies lost text and formatting on
Telegram. Through the gateway's real delivery path (the real Telegram adapter against the fake
Bot API server, the real agent against the scripted model server), every character of a long
reply arrives exactly once and every part of a code block is still a code block; on Slack too
(its real adapter against the fake Slack server)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from app.gateway.delivery import ReplyStream
from channels.base import OutboundMessage
from tests.agent_support import responder
from tests.fakes.model_server import FakeModelServer, text_reply
from tests.fakes.telegram_server import FakeTelegram, SentMessage
from tests.gateway_support import FakeChannel
from tests.telegram_support import make_channel, until
from tests.test_gateway_telegram import telegram_rig
from tests.test_slack import running

OWNER = 111


def answer_streamed(tmp_path: Path, reply: str, *, chunk_delay_s: float) -> list[SentMessage]:
    """Ask the owner's question, let the reply stream (edits every 50 ms), return the chat."""

    async def scenario() -> list[SentMessage]:
        with FakeModelServer() as server, FakeTelegram() as tg:
            server.respond_with(responder(turn=text_reply(reply, chunk_delay_s=chunk_delay_s)))
            rig = telegram_rig(tmp_path, server, tg)
            rig.gateway.channels["telegram"].min_edit_interval_s = 0.05
            await rig.gateway.start()
            tg.push(tg.private_text("the long one, please"))
            await until(lambda: any(m.chat_id == OWNER for m in tg.sent), 30, "the reply")
            await rig.gateway.idle()
            await rig.close()
            return [m for m in tg.sent if m.chat_id == OWNER]

    return asyncio.run(scenario())


def test_a_streamed_900_line_code_block_arrives_whole_and_every_part_is_preformatted(
    tmp_path: Path,
) -> None:
    code = "```\n" + "".join(f"L{n} = {n}\n" for n in range(900)) + "```"
    chat = answer_streamed(tmp_path, code, chunk_delay_s=0.001)

    assert len(chat) >= 3
    lines = [line for m in chat for line in m.text.split("\n") if line]
    assert lines == [f"L{n} = {n}" for n in range(900)]
    for part in chat:
        assert part.parse_mode == "HTML"
        assert part.raw.startswith("<pre>") and part.raw.endswith("</pre>")
        assert part.raw.count("<pre>") == 1


def test_a_long_reply_of_paragraphs_and_code_loses_no_paragraph(tmp_path: Path) -> None:
    paragraphs = [f"Paragraph {i} **bold** <tag> & `code` " + "x" * 300 for i in range(30)]
    code = "```python\n" + "".join(f"print({j})\n" for j in range(500)) + "```\n"
    chat = answer_streamed(tmp_path, "\n\n".join(paragraphs) + "\n\n" + code, chunk_delay_s=0.0)

    shown = "\n".join(m.text for m in chat)
    for i in range(30):
        assert shown.count(f"Paragraph {i} bold <tag> & code {'x' * 300}") == 1
    assert re.findall(r"print\((\d+)\)", shown) == [str(j) for j in range(500)]
    for part in chat:
        assert ("print(" in part.text) == ("<pre>" in part.raw)
        assert part.raw.count("<pre>") == part.raw.count("</pre>")


def test_an_edit_that_outgrows_one_message_continues_in_new_messages(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeTelegram() as tg:
            channel = make_channel(tg, tmp_path)
            [first] = await channel.send(OutboundMessage("telegram", str(OWNER), "Starting…"))
            text = "\n\n".join(f"Part {i}: " + "y" * 1000 for i in range(10))
            occupied = await channel.edit(first, text)
            await channel.stop()

            assert occupied[0] == first and len(occupied) >= 3
            assert [m.message_id for m in tg.sent] == [int(s.message_id) for s in occupied]
            shown = "\n".join(m.text for m in tg.sent)
            assert [shown.count(f"Part {i}: ") for i in range(10)] == [1] * 10

    asyncio.run(scenario())


def test_a_reply_streamed_to_slack_keeps_every_part_of_a_code_block_fenced(
    tmp_path: Path,
) -> None:
    code = "Here:\n\n```\n" + "".join(f"line {n} = {n * 2}\n" for n in range(800)) + "```"

    async def scenario() -> list[str]:
        async with running(tmp_path) as (slack, channel, _inbox):
            channel.min_edit_interval_s = 0.0
            stream = ReplyStream(channel, OutboundMessage("slack", "D0DM", ""))
            for word in re.findall(r"\s*\S+|\s+", code):
                stream.feed(word)
                await asyncio.sleep(0)
            await stream.finish(code)
            return [str(message["text"]) for message in slack.posted]

    posts = asyncio.run(scenario())
    assert len(posts) >= 3
    assert all(post.count("```") == 2 for post in posts[1:])  # each part is a code block
    lines = re.findall(r"line (\d+) = ", "\n".join(posts))
    assert lines == [str(n) for n in range(800)]


def test_a_final_reply_shorter_than_what_streamed_leaves_no_stale_text() -> None:
    async def scenario() -> FakeChannel:
        channel = FakeChannel("telegram", max_message_chars=100)
        stream = ReplyStream(channel, OutboundMessage("telegram", "1", ""))
        stream.feed("Let me look that up. " * 12)  # streamed text the final reply drops
        await asyncio.sleep(0.05)
        await stream.finish("It is 42.")
        return channel

    channel = asyncio.run(scenario())
    assert channel.texts() == ["It is 42.", "(the reply is above)", "(the reply is above)"]
