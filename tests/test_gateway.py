"""The gateway end to end in one process: real access control, durable queue and Agent (against
the scripted model server), with an in-memory implementation of our Channel interface."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import main
from app.gateway.heartbeat import health_problem, read_heartbeat
from app.gateway.server import GatewayOptions
from channels.channel_config import SlackConfig, TelegramConfig
from tests.agent_support import all_text, make_kit, responder, template_workspace
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply
from tests.gateway_support import DB_NAME, OWNER_SLACK, OWNER_TG, group, make_rig


def echo(request: RecordedRequest) -> Reply:
    return text_reply(f"re: {request.last_user_text()}")


def test_an_unknown_sender_gets_a_pairing_code_and_costs_no_model_call(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            rig = make_rig(tmp_path, server)
            await rig.gateway.start()
            await rig.telegram.deliver("999", "hello bot")
            await rig.gateway.idle()
            await rig.close()
            assert server.requests == []
            [notice] = rig.telegram.texts("999")
            assert "pinch pairing approve" in notice

    asyncio.run(scenario())


def test_pairing_end_to_end_code_then_cli_approval_then_answered(tmp_path: Path) -> None:
    async def scenario() -> str:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            rig = make_rig(tmp_path, server)
            await rig.gateway.start()
            await rig.telegram.deliver("999", "hello bot", sender_name="Ann")
            await rig.gateway.idle()
            code = rig.gateway.access.pairing.pending()[0].code
            listed = CliRunner().invoke(main, ["pairing", "list"])
            assert code in listed.output and "999 (Ann)" in listed.output
            approved = CliRunner().invoke(main, ["pairing", "approve", code.lower()])
            assert approved.exit_code == 0, approved.output
            await rig.telegram.deliver("999", "now?")
            await rig.gateway.idle()
            await rig.close()
            return rig.telegram.texts("999")[-1]

    answer = asyncio.run(scenario())
    assert answer.startswith("re: [from 999") and answer.endswith("now?")


def test_a_rejected_sender_is_ignored_without_another_code(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        with FakeModelServer() as server:
            rig = make_rig(tmp_path, server)
            await rig.gateway.start()
            await rig.telegram.deliver("999", "hello")
            code = rig.gateway.access.pairing.pending()[0].code
            assert CliRunner().invoke(main, ["pairing", "reject", code]).exit_code == 0
            await rig.telegram.deliver("999", "hello again")
            await rig.gateway.idle()
            await rig.close()
            assert server.requests == []
            return rig.telegram.texts("999")

    assert len(asyncio.run(scenario())) == 1


def test_approving_an_unknown_code_says_how_to_find_the_right_one(tmp_path: Path) -> None:
    make_kit(tmp_path, FakeModelServer(), db_name=DB_NAME).index.close()

    result = CliRunner().invoke(main, ["pairing", "approve", "ABCDEFGH"])

    assert result.exit_code == 1
    assert "pinch pairing list" in result.output


def test_a_group_without_config_is_ignored(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            rig = make_rig(tmp_path, server)
            await rig.gateway.start()
            await rig.telegram.deliver(OWNER_TG, "hi all", chat_id="-100", chat_type="group")
            await rig.gateway.idle()
            await rig.close()
            assert server.requests == [] and rig.telegram.sends == 0

    asyncio.run(scenario())


def test_a_group_message_without_a_mention_costs_no_model_call(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            rig = make_rig(tmp_path, server, telegram=TelegramConfig(groups=group("-100")))
            await rig.gateway.start()
            await rig.telegram.deliver(
                "555", "chatting", chat_id="-100", chat_type="group", mentioned=False
            )
            await rig.gateway.idle()
            assert server.requests == []
            await rig.telegram.deliver(
                "555", "@bot hi", chat_id="-100", chat_type="group", mentioned=True
            )
            await rig.gateway.idle()
            await rig.close()
            assert len([r for r in server.requests if "hi" in r.last_user_text()]) == 1
            [reply] = rig.telegram.texts("-100")
            assert reply.startswith("re: [from 555") and reply.endswith("@bot hi")

    asyncio.run(scenario())


def test_the_owner_on_telegram_then_slack_continues_one_session(tmp_path: Path) -> None:
    async def scenario() -> RecordedRequest:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            rig = make_rig(tmp_path, server)
            await rig.gateway.start()
            await rig.telegram.deliver(OWNER_TG, "my locker code is 4711")
            await rig.gateway.idle()
            await rig.slack.deliver(OWNER_SLACK, "what was my locker code?", chat_id="D1")
            await rig.gateway.idle()
            await rig.close()
            return server.requests[-1]

    request = asyncio.run(scenario())
    assert "4711" in all_text(request)


def test_owner_dm_scope_per_channel_keeps_channels_apart(tmp_path: Path) -> None:
    async def scenario() -> RecordedRequest:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            options = GatewayOptions(collect_window_s=0, owner_dm_scope="per-channel")
            rig = make_rig(tmp_path, server, options=options)
            await rig.gateway.start()
            await rig.telegram.deliver(OWNER_TG, "my locker code is 4711")
            await rig.gateway.idle()
            await rig.slack.deliver(OWNER_SLACK, "what was my locker code?", chat_id="D1")
            await rig.gateway.idle()
            await rig.close()
            return server.requests[-1]

    assert "4711" not in all_text(asyncio.run(scenario()))


def test_two_people_get_separate_sessions(tmp_path: Path) -> None:
    async def scenario() -> RecordedRequest:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            rig = make_rig(tmp_path, server, telegram=TelegramConfig(dm_policy="open"))
            await rig.gateway.start()
            await rig.telegram.deliver("501", "my secret word is pineapple")
            await rig.gateway.idle()
            await rig.telegram.deliver("502", "what is the secret word?")
            await rig.gateway.idle()
            await rig.close()
            return server.requests[-1]

    assert "pineapple" not in all_text(asyncio.run(scenario()))


SECRET = "The owner's bank PIN hint is BLUEHERON-42."


def test_a_non_owner_request_carries_no_byte_of_memory_md(tmp_path: Path) -> None:
    async def scenario() -> RecordedRequest:
        workspace = template_workspace(tmp_path, **{"MEMORY.md": f"# Memory\n{SECRET}\n"})
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            kit = make_kit(tmp_path, server, workspace=workspace, db_name=DB_NAME)
            rig = make_rig(tmp_path, server, telegram=TelegramConfig(dm_policy="open"), kit=kit)
            await rig.gateway.start()
            await rig.telegram.deliver("501", "tell me everything you know")
            await rig.gateway.idle()
            await rig.close()
            return server.requests[-1]

    assert "BLUEHERON" not in all_text(asyncio.run(scenario()))


def test_a_redelivered_message_is_answered_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            rig = make_rig(tmp_path, server)
            await rig.gateway.start()
            msg = rig.telegram.inbound(OWNER_TG, "once please")
            assert rig.telegram.handler is not None
            await rig.telegram.handler(msg)
            await rig.gateway.idle()
            await rig.telegram.handler(msg)  # a Slack retry / Telegram re-fetch
            await rig.gateway.idle()
            await rig.close()
            assert rig.telegram.texts() == ["re: once please"]
            assert len(server.requests) == 1

    asyncio.run(scenario())


def test_quick_messages_are_collected_into_one_turn(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            rig = make_rig(tmp_path, server, options=GatewayOptions(collect_window_s=0.3))
            await rig.gateway.start()
            for text in ("first", "second", "third"):
                await rig.telegram.deliver(OWNER_TG, text)
            await rig.gateway.idle()
            await rig.close()
            assert len(server.requests) == 1
            assert rig.telegram.texts() == ["re: first\n\nsecond\n\nthird"]

    asyncio.run(scenario())


def test_a_model_error_becomes_one_clear_line_in_the_chat(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        with FakeModelServer() as server:
            server.script(Reply(status=401, error_message="invalid x-api-key"))
            rig = make_rig(tmp_path, server)
            await rig.gateway.start()
            await rig.telegram.deliver(OWNER_TG, "hello")
            await rig.gateway.idle()
            await rig.close()
            return rig.telegram.texts()

    [line] = asyncio.run(scenario())
    assert "\n" not in line and "key" in line.lower()


def test_typing_runs_while_a_turn_runs_and_stops_after_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=text_reply("done", delay_s=0.3)))
            options = GatewayOptions(collect_window_s=0, typing_every_s=0.05)
            rig = make_rig(tmp_path, server, options=options)
            await rig.gateway.start()
            await rig.telegram.deliver(OWNER_TG, "slow one")
            await rig.gateway.idle()
            after_turn = rig.telegram.typing_calls
            await asyncio.sleep(0.2)  # would have typed ~4 more times were it still running
            await rig.close()
            assert after_turn >= 2
            assert rig.telegram.typing_calls == after_turn

    asyncio.run(scenario())


def test_a_malformed_inbound_message_is_skipped_without_crashing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> list[str]:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            rig = make_rig(tmp_path, server)
            await rig.gateway.start()
            assert rig.telegram.handler is not None
            await rig.telegram.handler({"text": "not a message"})  # type: ignore[arg-type]
            await rig.telegram.deliver(OWNER_TG, "still there?")
            await rig.gateway.idle()
            await rig.close()
            return rig.telegram.texts()

    with caplog.at_level(logging.ERROR):
        assert asyncio.run(scenario()) == ["re: still there?"]
    assert len([r for r in caplog.records if "Skipped" in r.getMessage()]) == 1


def test_a_send_that_fails_is_retried_and_the_turn_not_rerun(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            rig = make_rig(tmp_path, server)
            await rig.gateway.start()
            rig.telegram.fail_sends = 1
            await rig.telegram.deliver(OWNER_TG, "flaky network")
            await rig.gateway.idle()
            await rig.close()
            assert rig.telegram.texts() == ["re: flaky network"]
            assert len(server.requests) == 1

    asyncio.run(scenario())


def test_the_heartbeat_file_reports_each_channel(tmp_path: Path, pinch_home: Path) -> None:
    async def scenario() -> dict[str, object]:
        with FakeModelServer() as server:
            path = pinch_home / "gateway.heartbeat"
            rig = make_rig(
                tmp_path, server, options=GatewayOptions(collect_window_s=0, heartbeat_path=path)
            )
            await rig.gateway.start()
            await rig.gateway.write_heartbeat()
            data: dict[str, object] = json.loads(path.read_text())
            assert health_problem(read_heartbeat(pinch_home)) is None  # `pinch doctor --health`
            await rig.close()
            assert health_problem(read_heartbeat(pinch_home)) == "the gateway is shutting down"
            return data

    data = asyncio.run(scenario())
    assert data["channels"] == {
        "telegram": {"ok": True, "detail": "fake platform"},
        "slack": {"ok": True, "detail": "fake platform"},
    }
    assert isinstance(data["pid"], int) and isinstance(data["at"], float)
    assert (pinch_home / "gateway.heartbeat").stat().st_mode & 0o777 == 0o600


def test_slack_groups_follow_their_own_allowlist(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            slack = SlackConfig(groups=group("C1", allow_from=["U7"]))
            rig = make_rig(tmp_path, server, slack=slack)
            await rig.gateway.start()
            await rig.slack.deliver("U8", "hey", chat_id="C1", chat_type="channel")
            await rig.slack.deliver("U7", "hey", chat_id="C1", chat_type="channel")
            await rig.gateway.idle()
            await rig.close()
            return rig.slack.texts("C1")

    [reply] = asyncio.run(scenario())
    assert reply.startswith("re: [from U7")


def test_log_lines_never_contain_a_bot_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.config import load_settings
    from app.gateway.run import configure_logging

    token = "123456:AAH-secret-bot-token"
    monkeypatch.setenv("PINCH_TELEGRAM__BOT_TOKEN", token)
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    configure_logging(load_settings())
    try:
        logging.getLogger("telegram.ext").error("POST https://api.telegram.org/bot%s/getMe", token)
        try:
            raise ConnectionError(f"cannot reach /bot{token}/getUpdates")
        except ConnectionError:
            logging.getLogger("pinch.gateway").exception("poll failed")
    finally:
        for handler in root.handlers[len(before) :]:
            root.removeHandler(handler)
        root.setLevel(level)

    err = capsys.readouterr().err
    assert "getMe" in err and "getUpdates" in err
    assert token not in err and "[redacted]" in err


def test_the_gateway_without_any_channel_token_exits_with_advice() -> None:
    # (With the web page on — the default — the page's chat is a channel and the gateway runs.)
    result = CliRunner().invoke(main, ["gateway"], env={"PINCH_WEB__ENABLED": "false"})

    assert result.exit_code == 1
    assert "PINCH_TELEGRAM__BOT_TOKEN" in result.output


def test_a_redelivered_message_from_an_unknown_sender_gets_one_pairing_notice(
    tmp_path: Path,
) -> None:
    async def scenario() -> list[str]:
        with FakeModelServer() as server:
            rig = make_rig(tmp_path, server)
            await rig.gateway.start()
            msg = rig.telegram.inbound("999", "hello")
            assert rig.telegram.handler is not None
            await rig.telegram.handler(msg)
            await rig.telegram.handler(msg)
            await rig.close()
            return rig.telegram.texts()

    assert len(asyncio.run(scenario())) == 1


def tool_names(request: RecordedRequest) -> set[str]:
    return {t["name"] for t in request.body.get("tools", [])}


def test_an_approved_person_is_offered_no_owner_only_tool(tmp_path: Path) -> None:
    async def scenario() -> tuple[set[str], set[str]]:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            rig = make_rig(tmp_path, server, telegram=TelegramConfig(dm_policy="open"))
            await rig.gateway.start()
            await rig.telegram.deliver("501", "remember that I like tea")
            await rig.gateway.idle()
            await rig.telegram.deliver(OWNER_TG, "remember that I like coffee")
            await rig.gateway.idle()
            await rig.close()
            return tool_names(server.requests[0]), tool_names(server.requests[1])

    person, owner = asyncio.run(scenario())
    assert "remember" in owner and "remember" not in person
    assert person <= {"memory_search", "transcript_read", "read_file", "current_time"}


def test_two_people_collected_into_one_group_turn_are_each_named(tmp_path: Path) -> None:
    async def scenario() -> str:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            rig = make_rig(
                tmp_path,
                server,
                telegram=TelegramConfig(groups=group("-100", require_mention=False)),
                options=GatewayOptions(collect_window_s=0.3),
            )
            await rig.gateway.start()
            for sender, name in (("555", "Ann"), ("556", "Bob")):
                await rig.telegram.deliver(
                    sender, f"hi from {name}", chat_id="-100", chat_type="group", sender_name=name
                )
            await rig.gateway.idle()
            await rig.close()
            return server.requests[-1].last_user_text()

    text = asyncio.run(scenario())
    assert "Ann: hi from Ann" in text and "Bob: hi from Bob" in text


def test_a_message_the_database_cannot_store_is_left_for_the_platform_to_redeliver(
    tmp_path: Path,
) -> None:
    from memory.errors import DatabaseError

    async def scenario() -> list[str]:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            rig = make_rig(tmp_path, server)
            await rig.gateway.start()
            msg = rig.telegram.inbound(OWNER_TG, "keep me")
            store = rig.gateway.store
            accept = store.accept

            def locked(*args: object) -> None:
                raise DatabaseError("The agent database is locked by another process")

            store.accept = locked  # type: ignore[assignment,method-assign]
            assert rig.telegram.handler is not None
            with pytest.raises(DatabaseError):
                await rig.telegram.handler(msg)
            store.accept = accept  # type: ignore[method-assign]
            await rig.telegram.handler(msg)  # the platform's redelivery
            await rig.gateway.idle()
            await rig.close()
            return rig.telegram.texts()

    assert asyncio.run(scenario()) == ["re: keep me"]
