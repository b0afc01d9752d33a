"""Secrets never reach the screen or a log: the one redaction (common.redact), the log filter
(app.logging_setup) and the CLI's error line."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from app.cli.main import main
from app.logging_setup import install_log_redaction
from channels.channel_config import SECRET_FIELDS
from common.redact import REDACTED, RedactingFilter, is_secret_name, redact

TELEGRAM = "1234567890:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0"


@pytest.mark.parametrize(
    "name",
    [
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "GEMINI_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "SLACK_CLIENT_SECRET",
        "PINCH_TELEGRAM__BOT_TOKEN",
        "PINCH_SLACK__APP_TOKEN",
    ],
)
def test_variables_named_like_secrets_are_secret(name: str) -> None:
    assert is_secret_name(name)


def test_every_channel_secret_setting_is_a_secret_variable() -> None:
    names = [f"PINCH_{s.upper()}__{f.upper()}" for s, fs in SECRET_FIELDS.items() for f in fs]

    assert names and all(is_secret_name(name) for name in names)


@pytest.mark.parametrize("name", ["PATH", "HOME", "PINCH_HOME", "PINCH_AGENT__MODEL"])
def test_ordinary_variables_are_not(name: str) -> None:
    assert not is_secret_name(name)


def test_the_value_of_a_configured_key_is_redacted_whatever_it_looks_like(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", "plainlookingvalue42")

    assert redact("sent plainlookingvalue42 twice: plainlookingvalue42") == (
        f"sent {REDACTED} twice: {REDACTED}"
    )


@pytest.mark.parametrize(
    "secret",
    [
        "sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345",
        "sk-proj-abcdefghijklmnopqrstuvwxyz",
        "xoxb-123456789012-1234567890123-abcdefghijklmnop",
        "xapp-1-A0123456789-1234567890-abcdef",
        TELEGRAM,
    ],
)
def test_credential_shaped_text_is_redacted_even_when_not_configured(secret: str) -> None:
    text = redact(f"the server said: bad key {secret}.")

    assert secret not in text
    assert text == f"the server said: bad key {REDACTED}."


def test_a_bearer_header_value_is_redacted() -> None:
    assert redact("Authorization: Bearer abc.def-ghi_jkl") == f"Authorization: Bearer {REDACTED}"


def test_values_passed_by_the_caller_are_redacted() -> None:
    assert redact("key=given-in-code-1234", ["given-in-code-1234", None]) == f"key={REDACTED}"


def test_ordinary_text_is_left_alone() -> None:
    text = "The dentist is on Tuesday at 10:30; ask Anna (sk-1) about the 2026-01-10 notes."

    assert redact(text) == text


@pytest.fixture
def log_stream() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("tests.redact")
    logger.addHandler(handler)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)
    logger.propagate = True


def test_every_log_record_is_redacted_once_the_filter_is_installed(
    log_stream: tuple[logging.Logger, io.StringIO], monkeypatch: pytest.MonkeyPatch
) -> None:
    logger, stream = log_stream
    monkeypatch.setenv("PINCH_TELEGRAM__BOT_TOKEN", TELEGRAM)
    install_log_redaction(logger)

    logger.warning("Polling failed with token %s", TELEGRAM)
    try:
        raise RuntimeError(f"https://api.telegram.org/bot{TELEGRAM}/getUpdates: 409")
    except RuntimeError:
        logger.exception("Telegram said no")

    written = stream.getvalue()
    assert TELEGRAM not in written
    assert written.count(REDACTED) == 2
    assert "Traceback" in written  # the traceback is kept, only blanked


def test_installing_twice_filters_once(log_stream: tuple[logging.Logger, io.StringIO]) -> None:
    logger, _ = log_stream
    install_log_redaction(logger)
    install_log_redaction(logger)

    handler = logger.handlers[-1]  # the fixture's
    assert sum(isinstance(f, RedactingFilter) for f in handler.filters) == 1


def test_the_pinch_command_redacts_python_s_last_resort_handler() -> None:
    assert CliRunner().invoke(main, ["--help"]).exit_code == 0

    assert logging.lastResort is not None
    assert any(isinstance(f, RedactingFilter) for f in logging.lastResort.filters)
