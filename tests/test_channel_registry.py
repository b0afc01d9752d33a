"""The one owner and channel registry: which channels exist, who the owner is on each, and which
chat reaches the owner."""

from __future__ import annotations

from app.channel_registry import CHANNELS, Owners, adapter_class, channel_row, channel_settings
from app.config import Settings
from common.channel_table import TERMINAL, channel_names
from memory.store.jobs_store import Target
from memory.store.sessions import SessionKey


def test_the_table_lists_the_terminal_telegram_slack_and_the_web_page_in_order() -> None:
    assert channel_names() == ("cli", "telegram", "slack", "web")
    assert channel_row("matrix") is None


def test_every_gateway_channel_has_settings_owners_a_token_and_an_adapter() -> None:
    settings = Settings()
    for row in CHANNELS:
        if row.adapter is None:
            assert row.name == TERMINAL
            continue
        assert row.config_section in channel_settings(settings)
        if row.always_owner:  # the web page: no platform ids, no token, on when enabled
            assert row.owners_key is None and row.token_variable is None
            assert isinstance(getattr(settings, row.config_section).enabled, bool)
            assert adapter_class(row).__name__ == "WebChannel"
            continue
        assert row.owners_key is not None and hasattr(settings.owners, row.owners_key)
        assert row.token_variable and row.token_variable.startswith("PINCH_")
        assert adapter_class(row).__name__.lower().startswith(row.name)


def test_the_terminal_user_is_always_the_owner() -> None:
    assert Owners().is_owner(TERMINAL, "anyone")


def test_the_web_pages_user_is_always_the_owner() -> None:
    assert Owners().is_owner("web", "owner")  # the page is behind the owner's login
    assert not Owners().is_owner("telegram", "owner")


def test_an_owner_is_recognised_only_on_the_channel_that_lists_them() -> None:
    owners = Owners.of({"telegram": ["111"], "slack": ["U1"]})

    assert owners.is_owner("telegram", "111") and owners.is_owner("slack", "U1")
    assert not owners.is_owner("slack", "111") and not owners.is_owner("telegram", "222")


def test_the_owners_chats_follow_the_table_and_take_the_first_id() -> None:
    owners = Owners.of({"slack": ["U1", "U2"], "telegram": ["111"]})

    assert owners.chats() == (Target("telegram", "111"), Target("slack", "U1"))
    assert Owners.of({}).chats() == ()


def test_owners_come_from_the_owners_section() -> None:
    settings = Settings(owners={"telegram": ["111"]})

    assert Owners.from_settings(settings).chats() == (Target("telegram", "111"),)


def test_the_main_session_reaches_the_owner_on_the_first_channel_with_an_id() -> None:
    owners = Owners.of({"slack": ["U1"]})

    assert owners.route(SessionKey.owner_main()) == Target("slack", "U1")
    assert owners.route(SessionKey.owner_direct("telegram")) is None
    assert Owners.of({}).route(SessionKey.owner_main()) is None


def test_other_conversations_are_reached_in_their_own_chat() -> None:
    owners = Owners.of({"telegram": ["111"]})
    person = SessionKey("main", "telegram", "direct", "555")
    thread = SessionKey("main", "slack", "channel", "C1", "171.2")

    assert owners.route(person) == Target("telegram", "555")
    assert owners.route(thread) == Target("slack", "C1", "171.2")
