"""Access control and session routing, without any model: who is answered, who gets a pairing
code, which session each message lands in."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.gateway.access import CODE_ALPHABET, Access, Pairing
from app.gateway.routing import owner_main_key, session_key_for
from channels.base import InboundMessage
from channels.channel_config import GroupRule, TelegramConfig
from memory.store.db import open_database
from memory.store.pairing_store import SqlitePairingStore
from memory.store.sessions import SessionKey


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def pairing(tmp_path: Path, clock: Clock) -> Iterator[Pairing]:
    db = open_database(tmp_path / "agent.sqlite", vector_backend="numpy")
    yield Pairing(SqlitePairingStore(db), clock=clock)
    db.close()


def access_for(pairing: Pairing, **telegram: Any) -> Access:
    return Access(
        owners={"telegram": ["111"]},
        channels={"telegram": TelegramConfig(**telegram)},
        pairing=pairing,
    )


def dm(sender: str, text: str = "hi", **fields: Any) -> InboundMessage:
    values: dict[str, Any] = {
        "channel": "telegram",
        "sender_id": sender,
        "chat_id": sender,
        "chat_type": "direct",
        "text": text,
        "message_id": "1",
        "dedup_key": f"{sender}:1",
        "mentioned": True,
    }
    values.update(fields)
    return InboundMessage(**values)


def in_group(sender: str, chat: str = "-100", *, mentioned: bool = True) -> InboundMessage:
    return dm(sender, chat_id=chat, chat_type="group", mentioned=mentioned)


# -- pairing ------------------------------------------------------------------------------------


def test_an_unknown_sender_gets_an_eight_character_unambiguous_code(
    pairing: Pairing,
) -> None:
    decision = access_for(pairing).check(dm("999"))

    [request] = pairing.pending()
    assert decision.action == "reply" and request.code in decision.text
    assert len(request.code) == 8 and set(request.code) <= set(CODE_ALPHABET)
    assert not set("0O1IL") & set(CODE_ALPHABET)


def test_a_sender_who_asks_again_within_the_hour_gets_the_same_code(
    pairing: Pairing, clock: Clock
) -> None:
    access = access_for(pairing)
    first = access.check(dm("999"))
    clock.now += 1800

    again = access.check(dm("999"))

    [request] = pairing.pending()
    assert request.code in first.text and request.code in again.text
    assert "still waiting" in again.text


def test_a_code_expires_after_an_hour_and_a_new_one_is_issued(
    pairing: Pairing, clock: Clock
) -> None:
    access = access_for(pairing)
    access.check(dm("999"))
    old = pairing.pending()[0].code
    clock.now += 3601

    assert pairing.pending() == []
    with pytest.raises(ValueError, match="expire"):
        pairing.decide(old, approve=True)
    access.check(dm("999"))
    assert pairing.pending()[0].code != old


def test_at_most_three_codes_are_pending_per_channel(pairing: Pairing) -> None:
    access = access_for(pairing)
    decisions = [access.check(dm(str(500 + i))) for i in range(4)]

    assert [d.action for d in decisions] == ["reply", "reply", "reply", "ignore"]
    assert len(pairing.pending()) == 3


def test_an_approved_sender_is_answered_as_a_person(pairing: Pairing) -> None:
    access = access_for(pairing)
    access.check(dm("999", sender_name="Ann"))

    request = pairing.decide(pairing.pending()[0].code.lower(), approve=True)

    assert (request.sender_id, request.sender_name) == ("999", "Ann")
    decision = access.check(dm("999"))
    assert (decision.action, decision.role) == ("answer", "person")


def test_a_rejected_sender_gets_nothing_more_within_the_hour(pairing: Pairing) -> None:
    access = access_for(pairing)
    access.check(dm("999"))
    pairing.decide(pairing.pending()[0].code, approve=False)

    assert access.check(dm("999")).action == "ignore"


def test_pairing_grants_direct_messages_only(pairing: Pairing) -> None:
    access = access_for(pairing, groups={"-100": GroupRule(allow_from=["555"])})
    access.check(dm("999"))
    pairing.decide(pairing.pending()[0].code, approve=True)

    assert access.check(in_group("999")).action == "ignore"


def test_pairing_codes_never_reach_the_log(
    pairing: Pairing, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        access_for(pairing).check(dm("999"))
        access_for(pairing).check(dm("999"))

    code = pairing.pending()[0].code
    assert caplog.records and all(code not in r.getMessage() for r in caplog.records)


# -- the other policies ----------------------------------------------------------------------


def test_owners_always_pass_even_with_direct_messages_disabled(pairing: Pairing) -> None:
    decision = access_for(pairing, dm_policy="disabled").check(dm("111"))

    assert (decision.action, decision.role) == ("answer", "owner")


def test_disabled_ignores_everyone_else(pairing: Pairing) -> None:
    assert access_for(pairing, dm_policy="disabled").check(dm("999")).action == "ignore"
    assert pairing.pending() == []


def test_allowlist_answers_only_listed_ids(pairing: Pairing) -> None:
    access = access_for(pairing, dm_policy="allowlist", allow_from=["777"])

    assert access.check(dm("777")).action == "answer"
    assert access.check(dm("999")).action == "ignore"
    assert pairing.pending() == []


def test_open_answers_anyone_as_a_person(pairing: Pairing) -> None:
    decision = access_for(pairing, dm_policy="open").check(dm("999"))

    assert (decision.action, decision.role) == ("answer", "person")


def test_messages_from_bots_are_ignored(pairing: Pairing) -> None:
    assert access_for(pairing, dm_policy="open").check(dm("999", is_bot=True)).action == "ignore"


def test_a_channel_without_access_settings_pairs_by_default(pairing: Pairing) -> None:
    access = Access(owners={}, channels={}, pairing=pairing)

    assert access.check(dm("999", channel="slack")).action == "reply"


def test_the_terminal_user_is_the_owner(pairing: Pairing) -> None:
    access = Access(owners={}, channels={}, pairing=pairing)

    assert access.check(dm("local", channel="cli")).role == "owner"


# -- groups -------------------------------------------------------------------------------------


def test_groups_are_ignored_without_group_config(pairing: Pairing) -> None:
    assert access_for(pairing, dm_policy="open").check(in_group("111")).action == "ignore"


def test_a_configured_group_needs_a_mention_by_default(pairing: Pairing) -> None:
    access = access_for(pairing, groups={"-100": GroupRule()})

    assert access.check(in_group("555", mentioned=False)).action == "ignore"
    assert access.check(in_group("555", mentioned=True)).action == "answer"


def test_a_group_can_answer_without_mentions(pairing: Pairing) -> None:
    access = access_for(pairing, groups={"-100": GroupRule(require_mention=False)})

    assert access.check(in_group("555", mentioned=False)).action == "answer"


def test_a_group_sender_allowlist_holds_even_when_the_bot_is_mentioned(
    pairing: Pairing,
) -> None:
    access = access_for(pairing, groups={"-100": GroupRule(allow_from=["555"])})

    assert access.check(in_group("556")).action == "ignore"
    assert access.check(in_group("555")).action == "answer"


# -- session keys -------------------------------------------------------------------------------


def key(msg: InboundMessage, owner: bool, scope: str = "main") -> SessionKey:
    return session_key_for(msg, agent_id="main", is_owner=owner, owner_dm_scope=scope)  # type: ignore[arg-type]


def test_the_owner_on_every_channel_shares_the_main_session() -> None:
    telegram = key(dm("111"), True)
    slack = key(dm("U1", channel="slack", chat_id="D1"), True)

    assert telegram == slack == owner_main_key("main")


def test_per_channel_scope_gives_the_owner_one_session_per_channel() -> None:
    telegram = key(dm("111"), True, "per-channel")
    slack = key(dm("U1", channel="slack", chat_id="D1"), True, "per-channel")

    assert telegram != slack
    assert telegram == SessionKey("main", "telegram", "direct", "owner")


def test_every_other_person_has_their_own_direct_session() -> None:
    assert key(dm("501"), False) == SessionKey("main", "telegram", "direct", "501")
    assert key(dm("501"), False) != key(dm("502"), False)


def test_each_group_and_each_thread_in_it_is_its_own_session() -> None:
    group = key(in_group("555"), False)
    topic = key(dm("555", chat_id="-100", chat_type="group", thread_id="7"), False)

    assert group == SessionKey("main", "telegram", "group", "-100")
    assert topic == SessionKey("main", "telegram", "group", "-100", "7")
    assert key(in_group("111"), True) == group  # the owner in a group is in the group's session
