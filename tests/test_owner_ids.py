"""`[owners] telegram = ["@olive"]` was accepted, and
the owner was then treated as a stranger. Owners are ids; a username is refused with advice."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import ConfigError, load_settings


def test_a_telegram_owner_given_as_a_username_is_refused_with_how_to_find_the_id(
    pinch_home: Path,
) -> None:
    pinch_home.mkdir(parents=True, exist_ok=True)
    (pinch_home / "config.toml").write_text('[owners]\ntelegram = ["@olive"]\n')
    with pytest.raises(ConfigError) as err:
        load_settings()
    message = str(err.value)
    assert "owners.telegram: '@olive' is not a Telegram user id" in message
    assert "numeric id" in message and "pinch pairing list" in message


def test_a_slack_owner_given_as_a_handle_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINCH_OWNERS__SLACK", '["@olive"]')
    with pytest.raises(ConfigError, match=r"owners\.slack: '@olive' is not a Slack member id"):
        load_settings()


def test_numeric_telegram_and_member_id_slack_owners_are_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PINCH_OWNERS__TELEGRAM", '["111222333"]')
    monkeypatch.setenv("PINCH_OWNERS__SLACK", '["U0123ABCD"]')
    owners = load_settings().owners
    assert (owners.telegram, owners.slack) == (["111222333"], ["U0123ABCD"])
