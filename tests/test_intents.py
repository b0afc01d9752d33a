"""Standing intents in the agent database (memory/lifecycle/intents.py): normalised trigger
matching,
the scope checked on every match, cooldown / max fires / expiry on an explicit clock, and fires
recorded atomically across connections.

Times are plain Unix seconds passed as `now`: no test sleeps.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.porter import porter_stem
from memory.lifecycle.intents import (
    DAY_S,
    IntentError,
    IntentScope,
    IntentStore,
    message_terms,
    trigger_terms,
)
from memory.store.db import Database, open_database
from memory.store.intents_store import INTENT_MIGRATIONS, ensure_intent_schema
from memory.store.sessions import SessionKey

T0 = 1_770_000_000.0  # 2026-02-02 02:40 UTC
HOUR = 3600.0
OWNER_KEY = SessionKey.owner_main()
OWNER = IntentScope.of(OWNER_KEY, "owner")
GROUP_KEY = SessionKey("main", "telegram", "group", "-100200")


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = open_database(tmp_path / "agent.sqlite", vector_backend="numpy")
    yield database
    database.close()


@pytest.fixture
def store(db: Database) -> IntentStore:
    return IntentStore.open(db)


def hangzhou(store: IntentStore, *triggers: str, **options: float) -> int:
    intent = store.create(
        OWNER,
        list(triggers) or ["Hangzhou"],
        "Remind the owner to confirm the return ticket.",
        now=T0,
        **options,  # type: ignore[arg-type]
    )
    return intent.id


def fires_for(store: IntentStore, scope: IntentScope, text: str, now: float) -> list[int]:
    """What a reply would fire: the candidates, each fired (as the agent does)."""
    return [
        i.id
        for i in store.candidates(scope, text, now=now)
        if store.fire(i.id, now=now, session_key=scope.chat, excerpt=text)
    ]


# ---- terms ------------------------------------------------------------------------------------


def test_terms_fold_case_and_full_width_letters() -> None:
    assert trigger_terms("ＨＡＮＧＺＨＯＵ") == trigger_terms("hangzhou") == ("hangzhou",)
    assert "hangzhou" in message_terms("Flying to HANGZHOU!")


def test_english_words_match_by_porter_stem() -> None:
    assert porter_stem("connections") == porter_stem("connected") == "connect"
    assert set(trigger_terms("return tickets")) <= message_terms("I returned the ticket")


def test_every_term_of_a_trigger_must_appear() -> None:
    terms = set(trigger_terms("return ticket"))
    assert not terms <= message_terms("the ticket to Hangzhou")
    assert terms <= message_terms("a ticket for the return")


def test_stopwords_are_glue_unless_a_trigger_is_nothing_else() -> None:
    assert trigger_terms("the return of the ticket") == ("return", "ticket")
    assert trigger_terms("The Who") == ("the", "who")


def test_cjk_triggers_match_by_bigram_and_a_single_character_by_itself() -> None:
    assert trigger_terms("杭州东站") == ("杭州", "州东", "东站")
    assert set(trigger_terms("杭州")) <= message_terms("下周去杭州出差")
    assert set(trigger_terms("猫")) <= message_terms("我的猫生病了")
    assert not set(trigger_terms("杭州东站")) <= message_terms("杭州西站")


def test_a_chinese_name_and_its_english_name_are_different_terms() -> None:
    assert not set(trigger_terms("杭州")) <= message_terms("Back from Hangzhou")
    assert not set(trigger_terms("Hangzhou")) <= message_terms("从杭州回来")


# ---- schema -----------------------------------------------------------------------------------


def test_the_schema_is_applied_once_and_recorded(db: Database) -> None:
    assert ensure_intent_schema(db) == [m.__name__ for m in INTENT_MIGRATIONS]
    assert ensure_intent_schema(db) == []
    rows = db.execute("SELECT name FROM schema_migrations WHERE owner = 'intents'")
    assert sorted(r[0] for r in rows) == sorted(m.__name__ for m in INTENT_MIGRATIONS)


def test_intents_survive_reopening_the_database(tmp_path: Path) -> None:
    path = tmp_path / "agent.sqlite"
    first = open_database(path, vector_backend="numpy")
    hangzhou(IntentStore.open(first))
    first.close()
    again = open_database(path, vector_backend="numpy")
    try:
        assert [i.action for i in IntentStore.open(again, now=T0).intents()] == [
            "Remind the owner to confirm the return ticket."
        ]
    finally:
        again.close()


def test_opening_the_store_marks_intents_past_their_expiry(db: Database) -> None:
    intent_id = hangzhou(IntentStore.open(db, now=T0), expires_in_s=DAY_S)
    reopened = IntentStore.open(db, now=T0 + DAY_S)
    intent = reopened.get(intent_id)
    assert intent is not None and intent.state == "expired"


# ---- creating ---------------------------------------------------------------------------------


def test_a_new_intent_is_armed_with_the_defaults(store: IntentStore) -> None:
    intent = store.get(hangzhou(store))
    assert intent is not None
    assert (intent.state, intent.fire_count, intent.max_fires) == ("armed", 0, 3)
    assert intent.cooldown_s == DAY_S and intent.expires_at == T0 + 90 * DAY_S
    assert intent.scope == OWNER and intent.creator == "owner"


def test_creating_the_same_intent_twice_keeps_one(store: IntentStore) -> None:
    assert hangzhou(store, "Hangzhou", "杭州") == hangzhou(store, "Hangzhou", "杭州")
    assert len(store.intents()) == 1


@pytest.mark.parametrize(
    ("triggers", "action", "advice"),
    [
        ([], "do it", "at least one trigger"),
        (["!!!"], "do it", "no words to match"),
        (["Hangzhou"], "   ", "action is empty"),
        (["Hangzhou"], "x" * 301, "keep it under 300"),
        (["one two three four five six seven eight nine"], "do it", "at most 8 words"),
    ],
)
def test_unusable_intents_are_refused_with_advice(
    store: IntentStore, triggers: list[str], action: str, advice: str
) -> None:
    with pytest.raises(IntentError, match=advice):
        store.create(OWNER, triggers, action, now=T0)
    assert store.intents(include_ended=True) == []


# ---- scope ------------------------------------------------------------------------------------


def test_an_owner_intent_fires_on_the_owners_message_in_that_chat(store: IntentStore) -> None:
    intent_id = hangzhou(store)
    assert fires_for(store, OWNER, "I land in Hangzhou on Friday", T0 + 1) == [intent_id]


def test_an_owner_intent_never_fires_for_another_person(store: IntentStore) -> None:
    hangzhou(store)
    stranger = IntentScope.of(SessionKey("main", "telegram", "direct", "555"), "person", "555")
    assert fires_for(store, stranger, "Hangzhou is lovely", T0 + 1) == []


def test_an_owner_intent_never_fires_in_a_group_even_for_the_owner(store: IntentStore) -> None:
    hangzhou(store)
    for kind in ("owner", "person"):
        in_group = IntentScope.of(GROUP_KEY, kind, "555")
        assert fires_for(store, in_group, "Hangzhou next week?", T0 + 1) == []


def test_an_intent_fires_only_in_its_own_chat(store: IntentStore) -> None:
    hangzhou(store)
    other_chat = IntentScope.of(SessionKey.owner_direct("telegram"), "owner")
    assert fires_for(store, other_chat, "Hangzhou", T0 + 1) == []


def test_an_owner_intent_ignores_automated_turns_in_the_owners_chat(store: IntentStore) -> None:
    hangzhou(store)
    automation = IntentScope.of(OWNER_KEY, "automation", "job-1")
    assert fires_for(store, automation, "Daily digest: Hangzhou weather", T0 + 1) == []


def test_an_intent_for_one_sender_ignores_other_senders_in_the_same_chat(
    store: IntentStore,
) -> None:
    alice = IntentScope.of(GROUP_KEY, "person", "555")
    intent = store.create(alice, ["Hangzhou"], "Ask Alice about the hotel.", now=T0)
    bob = IntentScope.of(GROUP_KEY, "person", "777")
    assert fires_for(store, bob, "Hangzhou", T0 + 1) == []
    assert fires_for(store, alice, "Hangzhou", T0 + 1) == [intent.id]


# ---- cooldown, max fires, expiry -------------------------------------------------------------


def test_an_intent_waits_out_its_cooldown_between_fires(store: IntentStore) -> None:
    intent_id = hangzhou(store)
    assert fires_for(store, OWNER, "Hangzhou", T0 + 1) == [intent_id]
    assert fires_for(store, OWNER, "Hangzhou again", T0 + 1 + 23 * HOUR) == []
    assert fires_for(store, OWNER, "Hangzhou again", T0 + 1 + 24 * HOUR) == [intent_id]


def test_an_intent_is_done_after_its_last_fire(store: IntentStore) -> None:
    intent_id = hangzhou(store)
    states = []
    for day in range(4):
        fires_for(store, OWNER, "Hangzhou", T0 + day * DAY_S + 1)
        intent = store.get(intent_id)
        assert intent is not None
        states.append((intent.state, intent.fire_count))
    assert states == [("fired", 1), ("fired", 2), ("done", 3), ("done", 3)]
    assert len(store.fires(intent_id)) == 3


def test_an_intent_does_not_fire_after_it_expires_and_is_marked_expired(
    store: IntentStore,
) -> None:
    intent_id = hangzhou(store, expires_in_s=7 * DAY_S)
    assert fires_for(store, OWNER, "Hangzhou", T0 + 7 * DAY_S) == []
    assert store.expire_due(now=T0 + 7 * DAY_S) == 1
    intent = store.get(intent_id)
    assert intent is not None and intent.state == "expired"
    assert intent.ended_at == T0 + 7 * DAY_S


def test_cancelling_stops_fires_and_keeps_the_history(store: IntentStore) -> None:
    intent_id = hangzhou(store)
    fires_for(store, OWNER, "Hangzhou", T0 + 1)
    cancelled = store.cancel(intent_id, now=T0 + 2)
    assert (cancelled.state, cancelled.fire_count, cancelled.ended_at) == ("cancelled", 1, T0 + 2)
    assert fires_for(store, OWNER, "Hangzhou", T0 + 2 * DAY_S) == []
    assert [f.excerpt for f in store.fires(intent_id)] == ["Hangzhou"]
    assert store.intents() == [] and [i.id for i in store.intents(include_ended=True)] == [
        intent_id
    ]


def test_cancelling_twice_or_a_missing_intent_is_advice(store: IntentStore) -> None:
    intent_id = hangzhou(store)
    store.cancel(intent_id, now=T0)
    with pytest.raises(IntentError, match="already cancelled"):
        store.cancel(intent_id, now=T0)
    with pytest.raises(IntentError, match="no standing intent #99"):
        store.cancel(99, now=T0)


# ---- matching ---------------------------------------------------------------------------------


def test_any_one_trigger_entry_fires_the_intent(store: IntentStore) -> None:
    intent_id = hangzhou(store, "Hangzhou", "杭州")
    assert fires_for(store, OWNER, "下周去杭州", T0 + 1) == [intent_id]
    assert fires_for(store, OWNER, "Hangzhou", T0 + 2) == []  # cooling down: one fire a day


def test_an_english_trigger_does_not_fire_on_the_chinese_name(store: IntentStore) -> None:
    hangzhou(store, "Hangzhou")
    assert fires_for(store, OWNER, "下周去杭州", T0 + 1) == []


def test_the_most_specific_intents_come_first(store: IntentStore) -> None:
    broad = store.create(OWNER, ["ticket"], "Broad.", now=T0)
    narrow = store.create(OWNER, ["return ticket"], "Narrow.", now=T0)
    found = store.candidates(OWNER, "Where is my return ticket?", now=T0 + 1)
    assert [i.id for i in found] == [narrow.id, broad.id]


def test_a_long_message_still_matches_a_word_near_its_end(store: IntentStore) -> None:
    intent_id = hangzhou(store)
    filler = " ".join(f"word{n}" for n in range(2_000))
    assert fires_for(store, OWNER, f"{filler} and then Hangzhou", T0 + 1) == [intent_id]


# ---- concurrency ------------------------------------------------------------------------------


def test_two_messages_at_once_fire_an_intent_once(tmp_path: Path) -> None:
    """Two connections to one file (as two processes would have), racing on 20 intents."""
    path = tmp_path / "agent.sqlite"
    dbs = [open_database(path, vector_backend="numpy") for _ in range(2)]
    stores = [IntentStore.open(d) for d in dbs]
    ids = [stores[0].create(OWNER, [f"topic{n}"], f"Act {n}.", now=T0).id for n in range(20)]
    message = " ".join(f"topic{n}" for n in range(20))
    start = threading.Barrier(2)
    fired: list[list[int]] = [[], []]

    def reply(n: int) -> None:
        start.wait()
        candidates = stores[n].candidates(OWNER, message, now=T0 + 1)
        fired[n] = [
            i.id
            for i in candidates
            if stores[n].fire(i.id, now=T0 + 1, session_key="k", excerpt=message)
        ]

    threads = [threading.Thread(target=reply, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    try:
        assert sorted(fired[0] + fired[1]) == ids
        assert all(len(stores[0].fires(i)) == 1 for i in ids)
    finally:
        for d in dbs:
            d.close()


def test_ended_intents_leave_the_prefilter_and_keep_their_row(
    store: IntentStore, db: Database
) -> None:
    done = hangzhou(store, "Hangzhou", "杭州", max_fires=1)
    cancelled = store.create(OWNER, ["Lisbon"], "Pack the charger.", now=T0).id
    expired = store.create(OWNER, ["Kyoto"], "Book the ryokan.", now=T0, expires_in_s=60).id
    kept = store.create(OWNER, ["Berlin"], "Call Jonas.", now=T0).id
    fires_for(store, OWNER, "Hangzhou", T0 + 1)
    store.cancel(cancelled, now=T0 + 2)
    store.expire_due(now=T0 + 120)

    rows = {r[0] // 16 for r in db.execute("SELECT rowid FROM intent_triggers")}
    assert rows == {kept}
    states = {i.id: i.state for i in store.intents(include_ended=True)}
    assert states == {done: "done", cancelled: "cancelled", expired: "expired", kept: "armed"}
