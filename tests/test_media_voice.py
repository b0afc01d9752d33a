"""Voice notes become the owner's words before the turn: real speech (espeak-ng → ffmpeg →
OGG/Opus, as Telegram sends it) through the fake Telegram and the fake Slack, transcribed by the
real litellm against a fake OpenAI-compatible `/v1/audio/transcriptions` server, or by a real
script (the command backend); timeouts, 500s, limits and an unconfigured backend."""

from __future__ import annotations

import asyncio
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.media.media_config import MediaConfig, VoiceConfig
from agent.requests import AgentRequest, Final, Notice
from common.attachment import Attachment
from memory.files.inbox import Inbox
from tests.agent_support import OWNER, Kit, make_kit, responder
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.transcription_server import FakeTranscriptionServer, Transcription
from tests.gateway_support import DB_NAME, make_rig
from tests.media_support import speech_ogg
from tests.telegram_support import make_channel, telegram_config, until

SPOKEN = "please remind me to buy oat milk on the way home"


def echo(request: RecordedRequest) -> Reply:
    return text_reply(f"re: {request.last_user_text()}")


def voice_kit(tmp_path: Path, server: FakeModelServer, voice: VoiceConfig, **kw: object) -> Kit:
    return make_kit(tmp_path, server, media=(voice, MediaConfig()), **kw)  # type: ignore[arg-type]


def save_voice(kit: Kit, data: bytes, *, duration: float | None = 3.0) -> Attachment:
    rel = Inbox(kit.workspace).save("voice-1.ogg", data, datetime.now(UTC))
    return Attachment("voice", rel, None, "audio/ogg", len(data), duration_s=duration)


async def run(kit: Kit, request: AgentRequest) -> tuple[str, list[str]]:
    notices = []
    reply = ""
    async for event in kit.agent.run(request):
        if isinstance(event, Notice):
            notices.append(event.text)
        elif isinstance(event, Final):
            reply = event.reply.text
    return reply, notices


def stored_user_texts(kit: Kit) -> list[str]:
    session = kit.store.current(OWNER)
    return [str(e.content.get("text")) for e in kit.store.events(session.id, kinds=("user",))]


# -- through the platforms --------------------------------------------------------------------


def test_a_telegram_voice_note_is_transcribed_and_the_model_gets_the_words(tmp_path: Path) -> None:
    audio = speech_ogg(SPOKEN, tmp_path)
    assert audio[:4] == b"OggS" and b"OpusHead" in audio[:200]

    async def scenario() -> None:
        with FakeModelServer() as server, FakeTelegram() as tg, FakeTranscriptionServer() as stt:
            stt.script(Transcription(SPOKEN, language="english"))
            server.respond_with(responder(turn=echo))
            voice = VoiceConfig(provider="litellm", model="whisper-1", api_base=stt.url)
            kit = voice_kit(tmp_path, server, voice, db_name=DB_NAME)
            rig = make_rig(tmp_path, server, telegram=telegram_config(tg), kit=kit)
            rig.gateway.channels["telegram"] = make_channel(tg, tmp_path)
            del rig.gateway.channels["slack"]
            await rig.gateway.start()
            tg.push(tg.voice(audio, duration=4))
            await until(lambda: any(m.chat_id == 111 for m in tg.sent), 60, "the answer")
            await rig.gateway.idle()
            texts = stored_user_texts(kit)
            await rig.close()

            [sent] = stt.requests
            assert sent.file == audio  # the OGG/Opus as Telegram delivered it, multipart
            assert sent.file_name and sent.file_name.endswith(".ogg")  # Telegram's .oga renamed
            assert sent.fields["model"] == "whisper-1"
            [request] = server.requests
            words = request.last_user_text()
            assert SPOKEN in words and "voice note, 0:04, transcribed" in words
            assert [m.text for m in tg.sent if m.chat_id == 111][-1].startswith("re: ")
            assert SPOKEN in texts[0]  # the transcript is what is stored (and so searched)
            saved = list((kit.workspace / "inbox").rglob("*.oga"))
            assert [p.read_bytes() for p in saved] == [audio]  # the audio stays in the inbox

    asyncio.run(scenario())


def test_a_slack_audio_file_is_transcribed(tmp_path: Path) -> None:
    from app.channel_registry import Owners
    from channels.slack.adapter import SlackChannel
    from memory.files.inbox import Inbox as FileInbox
    from tests.fakes.slack_server import FakeSlack
    from tests.test_slack import slack_config

    audio = speech_ogg("the meeting moved to Thursday", tmp_path)

    async def scenario() -> None:
        with FakeModelServer() as server, FakeTranscriptionServer() as stt:
            stt.script(Transcription("the meeting moved to Thursday"))
            server.respond_with(responder(turn=echo))
            async with FakeSlack() as slack:
                voice = VoiceConfig(provider="litellm", model="whisper-1", api_base=stt.url)
                kit = voice_kit(tmp_path, server, voice, db_name=DB_NAME)
                rig = make_rig(tmp_path, server, kit=kit)
                access = rig.gateway.access
                access.owners = Owners.of({**access.owners.ids, "slack": ["U0OWNER"]})
                rig.gateway.channels = {
                    "slack": SlackChannel(
                        slack_config(slack),
                        inbox=FileInbox(kit.workspace),
                        state_dir=tmp_path / "state",
                    )
                }
                await rig.gateway.start()
                await slack.wait_connected()
                clip = slack.add_file(audio, name="audio_message.ogg", mimetype="audio/ogg")
                await slack.push_event(slack.file_share("", [clip]))
                await slack.wait_for(lambda: bool(slack.posted), timeout=15)
                await rig.gateway.idle()
                await rig.close()
            assert stt.requests[0].file == audio
            assert "the meeting moved to Thursday" in server.requests[0].last_user_text()
            assert slack.posted[0]["text"].startswith("re: ")

    asyncio.run(scenario())


# -- backends and faults ----------------------------------------------------------------------


def test_the_command_backend_runs_a_real_script_with_the_file(tmp_path: Path) -> None:
    script = tmp_path / "fake-whisper"
    script.write_text(
        "#!/bin/sh\n"
        '[ -s "$2" ] || { echo "no audio at $2" >&2; exit 3; }\n'
        'head -c 4 "$2" | grep -q OggS || { echo "not ogg" >&2; exit 4; }\n'
        'echo "  words from the local model ($1)  "\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)

    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            voice = VoiceConfig(provider="command", command=f"{script} --lang-auto {{file}}")
            kit = voice_kit(tmp_path, server, voice)
            note = save_voice(kit, speech_ogg("hello there", tmp_path))
            _, notices = await run(kit, AgentRequest(OWNER, "", attachments=(note,)))
            assert notices == []
            assert "words from the local model (--lang-auto)" in server.requests[0].last_user_text()

            failing = VoiceConfig(provider="command", command=f"{script} --x /nonexistent")
            kit2 = voice_kit(tmp_path / "b", server, failing)
            note2 = save_voice(kit2, b"OggS....")
            _, notices = await run(kit2, AgentRequest(OWNER, "hi", attachments=(note2,)))
            [notice] = notices
            assert "couldn't transcribe" in notice and "exit status 3" in notice
            assert "\n" not in notice
            assert "not transcribed" in server.requests[-1].last_user_text()  # the turn went on

    asyncio.run(scenario())


def test_a_slow_command_is_stopped_at_the_timeout_and_the_turn_still_happens(
    tmp_path: Path,
) -> None:
    script = tmp_path / "slow"
    script.write_text("#!/bin/sh\nsleep 30\necho late\n")
    script.chmod(0o755)

    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            voice = VoiceConfig(provider="command", command=str(script), timeout_s=0.5)
            kit = voice_kit(tmp_path, server, voice)
            note = save_voice(kit, b"OggS")
            started = asyncio.get_running_loop().time()
            reply, notices = await run(kit, AgentRequest(OWNER, "", attachments=(note,)))
            assert asyncio.get_running_loop().time() - started < 10
            assert notices == [
                "(I couldn't transcribe your voice note: the [voice] command took longer than "
                "timeout_s = 0.5 s.)"
            ]
            assert reply.endswith(note.path + "]") and "re: " in reply  # answered all the same
            assert note.path in server.requests[0].last_user_text()  # where the audio is

    asyncio.run(scenario())


def test_a_500_and_a_timeout_from_the_service_are_one_line_each(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server, FakeTranscriptionServer() as stt:
            server.respond_with(responder(turn=echo))
            stt.script(Transcription(status=500), Transcription("late", delay_s=8))
            voice = VoiceConfig(
                provider="litellm", model="whisper-1", api_base=stt.url, timeout_s=2
            )
            kit = voice_kit(tmp_path, server, voice)
            note = save_voice(kit, b"OggS-first")
            _, notices = await run(kit, AgentRequest(OWNER, "", attachments=(note,)))
            assert len(notices) == 1 and "answered 500" in notices[0]
            _, notices = await run(kit, AgentRequest(OWNER, "again", attachments=(note,)))
            assert notices == [
                "(I couldn't transcribe your voice note: transcription with whisper-1 took "
                "longer than [voice] timeout_s = 2 s.)"
            ]
            assert len(server.requests) == 2  # both turns happened
            assert len(stored_user_texts(kit)) == 2

    asyncio.run(scenario())


def test_unconfigured_voice_tells_what_to_set_and_keeps_the_file(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            kit = voice_kit(tmp_path, server, VoiceConfig())  # provider = "none"
            note = save_voice(kit, b"OggS-audio")
            _, notices = await run(kit, AgentRequest(OWNER, "", attachments=(note,)))
            [notice] = notices
            assert '[voice] provider = "litellm"' in notice and "command" in notice
            assert (kit.workspace / str(note.path)).read_bytes() == b"OggS-audio"

    asyncio.run(scenario())


def test_a_missing_key_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)

    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            kit = voice_kit(tmp_path, server, VoiceConfig(provider="litellm", model="whisper-1"))
            note = save_voice(kit, b"OggS-audio")
            _, notices = await run(kit, AgentRequest(OWNER, "", attachments=(note,)))
            assert notices == [
                "(I couldn't transcribe your voice note: [voice] model = whisper-1 needs "
                "OPENAI_API_KEY in the environment.)"
            ]

    asyncio.run(scenario())


def test_limits_on_duration_and_size(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server, FakeTranscriptionServer() as stt:
            server.respond_with(responder(turn=echo))
            voice = VoiceConfig(
                provider="litellm", api_base=stt.url, max_duration_s=60, max_size_mb=1
            )
            kit = voice_kit(tmp_path, server, voice)
            long_note = save_voice(kit, b"OggS", duration=125)
            _, notices = await run(kit, AgentRequest(OWNER, "", attachments=(long_note,)))
            assert notices == [
                "(I couldn't transcribe your voice note: it is 2:05 long, over [voice] "
                "max_duration_s = 60 (1:00).)"
            ]
            big = save_voice(kit, b"OggS" + b"\x00" * (2 * 1024 * 1024))
            _, notices = await run(kit, AgentRequest(OWNER, "", attachments=(big,)))
            assert "over [voice] max_size_mb = 1" in notices[0]
            assert stt.requests == []  # neither was sent

    asyncio.run(scenario())


def test_the_duration_of_a_file_without_one_comes_from_its_header(tmp_path: Path) -> None:
    from agent.media import audio

    data = speech_ogg("one two three four five six seven eight", tmp_path)
    path = tmp_path / "x.ogg"
    path.write_bytes(data)
    from_ffprobe = audio.audio_duration(path)
    from_header = audio._from_header(path)
    assert from_ffprobe is not None and from_header is not None
    assert abs(from_ffprobe - from_header) < 0.1 and from_header > 1.0
    assert audio.audio_duration(tmp_path / "voice.wav") is not None  # espeak's WAV
    (tmp_path / "junk.ogg").write_bytes(b"not audio")
    assert audio._from_header(tmp_path / "junk.ogg") is None


def test_a_long_transcript_goes_through_the_oversized_message_rule(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server, FakeTranscriptionServer() as stt:
            server.respond_with(responder(turn=echo))
            stt.script(Transcription("word " * 20_000))
            voice = VoiceConfig(provider="litellm", api_base=stt.url)
            kit = voice_kit(
                tmp_path, server, voice, context_window=8_000, reserve_floor=1_000,
                soft_threshold=500,
            )  # fmt: skip
            note = save_voice(kit, b"OggS")
            _, notices = await run(kit, AgentRequest(OWNER, "", attachments=(note,)))
            assert any("Your message was too long" in n for n in notices)
            assert "[Pinch cut this message here" in stored_user_texts(kit)[0]
            assert len(server.requests[0].last_user_text()) < 20_000

    asyncio.run(scenario())


def test_voice_settings_come_from_the_environment_and_a_command_is_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.config import ConfigError, load_settings

    monkeypatch.setenv("PINCH_VOICE__PROVIDER", "command")
    monkeypatch.setenv("PINCH_VOICE__COMMAND", "~/stt.sh {file}")
    monkeypatch.setenv("PINCH_VOICE__MAX_DURATION_S", "90")
    settings = load_settings()
    assert settings.voice.command == "~/stt.sh {file}" and settings.voice.max_duration_s == 90
    monkeypatch.delenv("PINCH_VOICE__COMMAND")
    with pytest.raises(ConfigError, match='provider = "command" needs command'):
        load_settings()


def test_pinch_doctor_checks_the_voice_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.cli.doctor import check_voice, optional_checks
    from app.config import load_settings

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert check_voice not in optional_checks(load_settings())  # provider "none": no check
    monkeypatch.setenv("PINCH_VOICE__PROVIDER", "litellm")
    result = check_voice(load_settings())
    assert (result.ok, result.detail) == (False, "whisper-1: export OPENAI_API_KEY")
    monkeypatch.setenv("PINCH_VOICE__PROVIDER", "command")
    monkeypatch.setenv("PINCH_VOICE__COMMAND", str(tmp_path / "nope") + " {file}")
    assert not check_voice(load_settings()).ok
    monkeypatch.setenv("PINCH_VOICE__COMMAND", "/bin/cat {file}")
    assert check_voice(load_settings()).detail == "command /bin/cat"


def test_a_real_pinch_gateway_transcribes_with_voice_settings_from_the_environment(
    pinch_home: Path, tmp_path: Path
) -> None:
    """The composition root wires [voice] and [media]: `pinch gateway` as a process."""
    import signal

    from tests.test_gateway_telegram import pinch_gateway, wait_for

    audio = speech_ogg("water the plants", tmp_path)
    with FakeModelServer() as model, FakeTelegram() as tg, FakeTranscriptionServer() as stt:
        stt.script(Transcription("water the plants"))
        model.respond_with(responder(turn=echo))
        proc = pinch_gateway(
            tg,
            model,
            PINCH_VOICE__PROVIDER="litellm",
            PINCH_VOICE__MODEL="whisper-1",
            OPENAI_API_BASE=stt.url,
        )
        try:
            tg.push(tg.voice(audio, duration=2))
            wait_for(lambda: bool(tg.sent), timeout=90, what="the answer")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        assert "water the plants" in model.requests[0].last_user_text()
        assert stt.requests[0].file == audio
