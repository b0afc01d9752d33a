"""Photos reach a model that reads images as image blocks, downscaled with Pillow: decoded by the
fake model server (size, media type), through the fake Telegram and the fake Slack (files.info,
then the download), with the real anthropic SDK and litellm; a 20 MB PNG, a corrupt image, a
vision-less model, an album over the cap; the database keeps paths, /context counts tokens."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

from agent.media.media_config import MediaConfig, VoiceConfig
from agent.requests import AgentRequest, Final, Notice
from agent.types import image_tokens
from common.attachment import Attachment
from memory.files.inbox import Inbox
from tests.agent_support import OWNER, Kit, make_kit, responder
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply
from tests.fakes.telegram_server import FakeTelegram
from tests.gateway_support import DB_NAME, make_rig
from tests.media_support import jpeg, noisy_png
from tests.telegram_support import make_channel, telegram_config, until


def echo(request: RecordedRequest) -> Reply:
    return text_reply(f"re: {request.last_user_text()}")


def image_kit(tmp_path: Path, server: FakeModelServer, **kw: object) -> Kit:
    media = kw.pop("media", MediaConfig())
    return make_kit(tmp_path, server, media=(VoiceConfig(), media), **kw)  # type: ignore[arg-type]


def save(
    kit: Kit, name: str, data: bytes, kind: str = "photo", mime: str = "image/jpeg"
) -> Attachment:
    rel = Inbox(kit.workspace).save(name, data, datetime.now(UTC))
    return Attachment(kind, rel, name if kind == "document" else None, mime, len(data))  # type: ignore[arg-type]


async def run(kit: Kit, request: AgentRequest) -> tuple[str, list[str]]:
    notices, reply = [], ""
    async for event in kit.agent.run(request):
        if isinstance(event, Notice):
            notices.append(event.text)
        elif isinstance(event, Final):
            reply = event.reply.text
    return reply, notices


def test_a_telegram_photo_reaches_claude_as_a_downscaled_image_block(tmp_path: Path) -> None:
    photo = jpeg(4000, 3000)  # a 12-megapixel phone photo

    async def scenario() -> None:
        with FakeModelServer() as server, FakeTelegram() as tg:
            server.respond_with(responder(turn=echo))
            kit = image_kit(tmp_path, server, db_name=DB_NAME)
            rig = make_rig(tmp_path, server, telegram=telegram_config(tg), kit=kit)
            rig.gateway.channels["telegram"] = make_channel(tg, tmp_path)
            del rig.gateway.channels["slack"]
            await rig.gateway.start()
            tg.push(tg.photo(photo, caption="what does the receipt say?"))
            await until(lambda: any(m.chat_id == 111 for m in tg.sent), 30, "the answer")
            await rig.gateway.idle()
            session = kit.store.current(OWNER)
            [event] = kit.store.events(session.id, kinds=("user",))
            await rig.close()

        [image] = server.requests[0].images()
        assert (image.media_type, image.format) == ("image/jpeg", "JPEG")
        assert (image.width, image.height) == (1568, 1176)
        assert image.size < 3_750_000
        assert "what does the receipt say?" in server.requests[0].last_user_text()
        # The database holds paths, never the picture.
        [stored] = event.content["attachments"]
        assert stored["image"]["path"].endswith(".model.jpg")
        assert (kit.workspace / stored["path"]).read_bytes() == photo  # the original stays
        assert len(json.dumps(event.content)) < 1_000

    asyncio.run(scenario())


def test_a_20_mb_png_is_downscaled_under_the_caps(tmp_path: Path) -> None:
    big = noisy_png(2600, 2600)
    assert len(big) > 20_000_000

    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            kit = image_kit(tmp_path, server, media=MediaConfig(max_image_mb=30))
            shot = save(kit, "screenshot.png", big, "document", "image/png")
            await run(kit, AgentRequest(OWNER, "", attachments=(shot,)))
        [image] = server.requests[0].images()
        assert max(image.width, image.height) == 1568
        assert image.size < 3_750_000 and image.media_type in ("image/jpeg", "image/png")

    asyncio.run(scenario())


def test_a_corrupt_image_gets_one_clear_line_and_the_turn_goes_on(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            kit = image_kit(tmp_path, server)
            broken = save(kit, "photo-1.jpg", jpeg(800, 600)[:2000])  # cut off mid-file
            junk = save(kit, "photo-2.jpg", b"\xff\xd8\xff not really a jpeg")
            reply, notices = await run(kit, AgentRequest(OWNER, "look", attachments=(broken, junk)))
        assert len(notices) == 2
        assert all(n.startswith("(I couldn't read photo-") and "\n" not in n for n in notices)
        assert server.requests[0].images() == []
        assert "not shown: unreadable" in server.requests[0].last_user_text()
        assert "re: look" in reply

    asyncio.run(scenario())


def test_a_model_without_vision_says_so_once_and_keeps_the_files(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            kit = image_kit(tmp_path, server, api="openai")  # openai/fake-model: no vision
            first = save(kit, "a.jpg", jpeg(640, 480))
            _, notices = await run(kit, AgentRequest(OWNER, "one", attachments=(first,)))
            assert len(notices) == 1 and "can't read images" in notices[0]
            assert first.path in notices[0]
            second = save(kit, "b.jpg", jpeg(640, 480))
            _, again = await run(kit, AgentRequest(OWNER, "two", attachments=(second,)))
            assert again == []  # said once
        assert all(r.images() == [] for r in server.requests)
        assert "not shown: the model can't read images" in server.requests[1].last_user_text()
        assert (kit.workspace / str(second.path)).exists()

    asyncio.run(scenario())


def test_a_litellm_vision_model_gets_a_data_url_image(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            kit = image_kit(tmp_path, server, api="openai", litellm_model="openai/gpt-4o")
            photo = save(kit, "whiteboard.jpg", jpeg(1000, 700))
            _, notices = await run(kit, AgentRequest(OWNER, "read it", attachments=(photo,)))
        assert notices == []
        [image] = server.requests[0].images()
        assert (image.width, image.height, image.media_type) == (1000, 700, "image/jpeg")
        user = [m for m in server.requests[0].body["messages"] if m["role"] == "user"][-1]
        assert [p["type"] for p in user["content"]] == ["text", "image_url"]

    asyncio.run(scenario())


def test_an_image_is_sent_in_its_turn_counted_by_context_and_named_after(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            kit = image_kit(tmp_path, server)
            photo = save(kit, "letter.jpg", jpeg(1200, 900))
            await run(kit, AgentRequest(OWNER, "the letter", attachments=(photo,)))
            context, _ = await run(kit, AgentRequest(OWNER, "/context detail"))
            await run(kit, AgentRequest(OWNER, "and now?"))
        first, second = server.requests
        assert len(first.images()) == 1
        assert second.images() == []  # not re-sent with the next message
        assert f"[attached photo: {photo.path} (1200×900)]" in json.dumps(
            second.body, ensure_ascii=False
        )
        tokens = image_tokens(1200, 900)
        assert tokens == 1440
        line = next(x for x in context.splitlines() if x.strip().startswith("images"))
        assert f"{tokens:,}" in line

    asyncio.run(scenario())


def test_an_album_is_one_turn_with_its_images_capped(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            kit = image_kit(tmp_path, server, media=MediaConfig(max_images=2))
            photos = tuple(save(kit, f"p{i}.jpg", jpeg(300 + i, 200)) for i in range(3))
            _, notices = await run(kit, AgentRequest(OWNER, "holiday", attachments=photos))
        assert [i.width for i in server.requests[0].images()] == [300, 301]
        assert notices == [
            "(You sent 3 pictures; I looked at the first 2 ([media] max_images). The rest are "
            "saved in the inbox.)"
        ]
        assert f"{photos[2].path}; not shown: over media max_images = 2" in (
            server.requests[0].last_user_text()
        )

    asyncio.run(scenario())


def test_a_slack_image_comes_through_files_info_and_the_download(tmp_path: Path) -> None:
    from app.channel_registry import Owners
    from channels.slack.adapter import SlackChannel
    from memory.files.inbox import Inbox as FileInbox
    from tests.fakes.slack_server import FakeSlack
    from tests.test_slack import slack_config

    picture = jpeg(2000, 1000)

    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            async with FakeSlack() as slack:
                kit = image_kit(tmp_path, server, db_name=DB_NAME)
                rig = make_rig(tmp_path, server, kit=kit)
                access = rig.gateway.access
                access.owners = Owners.of({**access.owners.ids, "slack": ["U0OWNER"]})
                rig.gateway.channels = {
                    "slack": SlackChannel(
                        slack_config(slack),
                        inbox=FileInbox(kit.workspace),
                        state_dir=tmp_path / "s",
                    )
                }
                await rig.gateway.start()
                await slack.wait_connected()
                stub = slack.add_file(
                    picture, name="IMG_1.jpg", mimetype="image/jpeg", check_file_info=True
                )
                await slack.push_event(slack.file_share("this one", [stub]))
                await slack.wait_for(lambda: bool(slack.posted), timeout=15)
                await rig.gateway.idle()
                await rig.close()
            assert slack.calls_to("files.info") and slack.calls_to("files.download")
        [image] = server.requests[0].images()
        assert (image.width, image.height) == (1568, 784)

    asyncio.run(scenario())


def test_after_compaction_the_summary_names_the_image_by_path(tmp_path: Path) -> None:
    from agent.compaction import with_file_paths
    from agent.history import split_turns
    from memory.store.sessions import TranscriptEvent

    content = {
        "text": "receipt",
        "attachments": [{"path": "inbox/2026-12-01/r.jpg", "kind": "photo"}],
    }
    event = TranscriptEvent(1, "user", content, 0.0)
    turns = split_turns([event])
    assert with_file_paths("## Decisions\n- none", turns).endswith(
        "Files received (in the workspace): inbox/2026-12-01/r.jpg"
    )
    already = "## Exact identifiers\n- inbox/2026-12-01/r.jpg"
    assert with_file_paths(already, turns) == already


def test_asked_again_the_model_reads_the_picture_with_read_file(tmp_path: Path) -> None:
    from tests.fakes.model_server import tool_reply

    async def scenario() -> None:
        with FakeModelServer() as server:
            kit = image_kit(tmp_path, server)
            photo = save(kit, "receipt.jpg", jpeg(3000, 2000))
            server.script(text_reply("A receipt."))
            await run(kit, AgentRequest(OWNER, "keep this", attachments=(photo,)))
            server.script(
                tool_reply("read_file", {"path": photo.path}),
                text_reply("It says 42 EUR."),
            )
            reply, _ = await run(kit, AgentRequest(OWNER, "what was the total on it again?"))
            session = kit.store.current(OWNER)
            [result] = kit.store.events(session.id, kinds=("tool_result",))
            server.script(text_reply("ok"))
            await run(kit, AgentRequest(OWNER, "thanks"))
        first, asked, answered, later = server.requests
        assert len(first.images()) == 1 and asked.images() == []
        [again] = answered.images()
        assert (again.width, again.height) == (1568, 1045)
        assert reply == "It says 42 EUR."
        assert result.content["image"]["path"].endswith(".model.jpg")
        assert "base64" not in json.dumps(result.content) and len(json.dumps(result.content)) < 600
        assert later.images() == []  # not re-sent after that turn

    asyncio.run(scenario())


def test_a_photo_from_someone_else_in_a_group_is_their_message(tmp_path: Path) -> None:
    from tests.agent_support import GROUP

    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            kit = image_kit(tmp_path, server)
            photo = save(kit, "meme.jpg", jpeg(500, 500))
            request = AgentRequest(
                GROUP, "", sender="person", sender_id="555", sender_name="Alice",
                attachments=(photo,),
            )  # fmt: skip
            await run(kit, request)
        [image] = server.requests[0].images()
        assert image.width == 500
        text = server.requests[0].last_user_text()
        assert text.startswith("[from Alice (telegram 555)]") and str(photo.path) in text

    asyncio.run(scenario())


def test_a_telegram_album_is_one_turn_with_its_pictures_capped(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server, FakeTelegram() as tg:
            server.respond_with(responder(turn=echo))
            kit = image_kit(tmp_path, server, db_name=DB_NAME, media=MediaConfig(max_images=2))
            rig = make_rig(tmp_path, server, telegram=telegram_config(tg), kit=kit)
            rig.gateway.channels["telegram"] = make_channel(tg, tmp_path)
            del rig.gateway.channels["slack"]
            await rig.gateway.start()
            tg.push(
                *[
                    tg.photo(jpeg(400 + i, 300), caption="trip" if i == 0 else None,
                             media_group_id="MG7")
                    for i in range(3)
                ]
            )  # fmt: skip
            await until(lambda: any(m.chat_id == 111 for m in tg.sent), 30, "the answer")
            await rig.gateway.idle()
            await rig.close()
        [request] = server.requests  # one turn
        assert [i.width for i in request.images()] == [400, 401]
        answer = "\n".join(m.text for m in tg.sent if m.chat_id == 111)
        assert "You sent 3 pictures; I looked at the first 2" in answer

    asyncio.run(scenario())


def test_a_real_compaction_keeps_the_pictures_path_in_the_summary(tmp_path: Path) -> None:
    from tests.agent_support import small_workspace

    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=text_reply("Seen.")))  # the summary names nothing
            kit = image_kit(
                tmp_path, server, workspace=small_workspace(tmp_path),
                context_window=4_000, reserve_floor=1_000, soft_threshold=500,
            )  # fmt: skip
            photo = save(kit, "whiteboard.jpg", jpeg(200, 150))
            await run(kit, AgentRequest(OWNER, "the plan", attachments=(photo,)))
            for i in range(20):
                await run(kit, AgentRequest(OWNER, f"note {i}: " + "lorem ipsum dolor " * 60))
                session = kit.store.current(OWNER)
                if kit.store.latest_compaction(session.id) is not None:
                    break
            latest = kit.store.latest_compaction(kit.store.current(OWNER).id)
            assert latest is not None, "no compaction happened"
            assert str(photo.path) in str(latest.content["summary"])
            summary_requests = [r for r in server.requests if "You summarise" in r.system_text()]
            assert str(photo.path) in json.dumps(summary_requests[0].body)  # given to summarise

    asyncio.run(scenario())


def test_a_decompression_bomb_is_refused_before_it_is_decoded() -> None:
    import io

    import pytest
    from PIL import Image

    from agent.media.images import ImageError, prepare_image

    out = io.BytesIO()
    Image.new("1", (12_000, 12_000)).save(out, "PNG")  # 144 megapixels in a few kB
    assert len(out.getvalue()) < 100_000
    with pytest.raises(ImageError, match=r"12000×12000 pixels, more than the 100 megapixels"):
        prepare_image(out.getvalue(), max_pixels=100_000_000)
