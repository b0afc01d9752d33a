"""Standing intents: "when X comes up, do Y", stored in the agent database and matched without a
model call before every reply.

    store = IntentStore.open(db)                                  # applies INTENT_MIGRATIONS
    scope = IntentScope.of(key, "owner")                          # where it may fire, for whom
    store.create(scope, ["Hangzhou", "杭州"], "remind me to confirm the return ticket", now=t)
    for intent in store.candidates(scope, "Back from Hangzhou on Sunday", now=t2):
        if store.fire(intent.id, now=t2, session_key=str(key)): ...   # at most once, atomically

An intent has trigger *entries*; it matches a message when every term of one entry appears in
it. Terms are normalised tokens: NFKC (full-width letters fold), case-folded, Porter-stemmed
English words, and CJK bigrams (single characters for one-character runs). Scripts never map
onto each other: "杭州" and "Hangzhou" are two entries when both should fire.

Life cycle: armed → fired (fired at least once, more fires left) → done (max fires reached); or
cancelled, or expired. Ended intents keep their row and their fires (history). The scope —
agent, channel, chat (the conversation's `SessionKey.memory_scope`) and sender — is checked on
every match, in SQL, so an intent the owner set in a private chat never fires for another person
nor in a group.

Every call blocks on SQLite; async callers run them in a worker thread.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from common.porter import porter_stem
from memory.errors import MemoryError_
from memory.store.db import Database
from memory.store.intents_store import (
    IntentFire,
    IntentRepository,
    IntentScope,
    NewIntent,
    StandingIntent,
    ensure_intent_schema,
    intents_for,
)
from memory.text import CJK_CHAR, ENGLISH_STOPWORDS, normalised_runs

DAY_S = 86_400.0
DEFAULT_COOLDOWN_S = DAY_S  # at least 24 h between two fires of one intent
DEFAULT_MAX_FIRES = 3
DEFAULT_EXPIRY_S = 90 * DAY_S
MAX_CANDIDATES = 256  # prefilter rows verified per message: bounded work on every reply
MAX_TRIGGERS = 8
MAX_TERMS_PER_TRIGGER = 8
MAX_ACTION_CHARS = 300  # three intents and their triggers always fit the 1,200-char block


class IntentError(MemoryError_):
    """An intent cannot be created, found or changed; the message says what to do."""


# ---- normalised terms ----------------------------------------------------------------------


def message_terms(text: str) -> frozenset[str]:
    """Every term a message offers: stems of its words, and each CJK character and bigram."""
    out: set[str] = set()
    for token in normalised_runs(text):
        if CJK_CHAR.match(token):
            out.update(token)
            out.update(token[i : i + 2] for i in range(len(token) - 1))
        else:
            out.add(porter_stem(token))
    return frozenset(out)


def trigger_terms(entry: str) -> tuple[str, ...]:
    """The terms that must all appear for trigger `entry` to match, in order, de-duplicated.

    English stopwords are left out ("the return ticket" needs "return" and "ticket") unless the
    entry is nothing else. A CJK run needs each of its bigrams ("杭州东站": 杭州, 州东, 东站)."""
    terms: list[str] = []
    glue: list[str] = []
    for token in normalised_runs(entry):
        if CJK_CHAR.match(token):
            found = (
                [token] if len(token) == 1 else [token[i : i + 2] for i in range(len(token) - 1)]
            )
            terms.extend(found)
        elif token in ENGLISH_STOPWORDS:
            glue.append(porter_stem(token))
        else:
            terms.append(porter_stem(token))
    return tuple(dict.fromkeys(terms or glue))


# ---- the store -----------------------------------------------------------------------------


class IntentStore:
    """The standing intents of one agent database: validation and matching here, rows in an
    `IntentRepository` (SQLite by default). `now` arguments are Unix seconds (tests pass their
    own clock's)."""

    def __init__(self, db: Database, repository: IntentRepository | None = None) -> None:
        self.db = db
        self.repository = repository if repository is not None else intents_for(db)

    @classmethod
    def open(cls, db: Database, *, now: float | None = None) -> IntentStore:
        """The store on `db`, its schema applied and intents past their expiry marked expired
        (matching skips them anyway; this keeps the prefilter small)."""
        ensure_intent_schema(db)
        store = cls(db)
        store.expire_due(now=time.time() if now is None else now)
        return store

    # -- creating and ending -----------------------------------------------------------------

    def create(
        self,
        scope: IntentScope,
        triggers: Sequence[str],
        action: str,
        *,
        now: float,
        creator: str = "owner",
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        max_fires: int = DEFAULT_MAX_FIRES,
        expires_in_s: float = DEFAULT_EXPIRY_S,
    ) -> StandingIntent:
        """A new armed intent; the same triggers and action already active in `scope` are
        returned as they are instead of a duplicate. Raises IntentError for unusable input."""
        entries, terms = _clean_triggers(triggers)
        action = " ".join(action.split())
        if not action:
            raise IntentError("Say what to do when the intent fires (the action is empty).")
        if len(action) > MAX_ACTION_CHARS:
            raise IntentError(
                f"The action is {len(action)} characters; keep it under {MAX_ACTION_CHARS} "
                "(a short reminder of what to do, not the whole context)."
            )
        if max_fires < 1 or cooldown_s < 0 or expires_in_s <= 0:
            raise IntentError("max_fires must be at least 1, the cooldown and expiry positive.")
        new = NewIntent(
            scope,
            tuple(entries),
            tuple(terms),
            action,
            creator,
            float(cooldown_s),
            int(max_fires),
            now,
            now + expires_in_s,
        )
        return self.repository.create(new)

    def cancel(self, intent_id: int, *, now: float) -> StandingIntent:
        """Cancel an active intent (its row and fires stay, as history). Raises IntentError
        when there is no such intent or it has already ended."""
        changed = self.repository.cancel(intent_id, now=now)
        intent = self.get(intent_id)
        if intent is None:
            raise IntentError(
                f"There is no standing intent #{intent_id}: `pinch intents list` shows them."
            )
        if not changed:
            raise IntentError(f"Standing intent #{intent_id} is already {intent.state}.")
        return intent

    def expire_due(self, *, now: float) -> int:
        """Mark active intents past their expiry as expired; returns how many."""
        return self.repository.expire_due(now=now)

    # -- reading -----------------------------------------------------------------------------

    def get(self, intent_id: int) -> StandingIntent | None:
        return self.repository.get(intent_id)

    def intents(
        self, *, scope: IntentScope | None = None, include_ended: bool = False
    ) -> list[StandingIntent]:
        """Intents, oldest first: active ones (all, with `include_ended`), of `scope` if given."""
        return self.repository.intents(scope=scope, include_ended=include_ended)

    def fires(self, intent_id: int) -> list[IntentFire]:
        return self.repository.fires(intent_id)

    # -- matching ----------------------------------------------------------------------------

    def candidates(
        self, scope: IntentScope, text: str, *, now: float, limit: int | None = None
    ) -> list[StandingIntent]:
        """The intents that may fire for `text` said in `scope` now: in scope, active, not
        expired, out of cooldown, and with one trigger entry whose terms all appear. Most
        specific (most terms matched) first, oldest first among equals; the first `limit` only
        when given. Reads only; `fire` records a fire."""
        terms = message_terms(text)
        if not terms:
            return []
        matched: dict[int, int] = {}  # intent id -> terms of its best matching entry
        entries = self.repository.matching_entries(
            scope, sorted(terms), now=now, limit=MAX_CANDIDATES
        )
        for intent_id, needed in entries:
            if all(t in terms for t in needed):
                matched[intent_id] = max(matched.get(intent_id, 0), len(needed))
        best = sorted(matched, key=lambda i: (-matched[i], i))[:limit]
        if not best:
            return []
        return sorted(self.repository.get_many(best), key=lambda i: best.index(i.id))

    def fire(self, intent_id: int, *, now: float, session_key: str, excerpt: str = "") -> bool:
        """Record one fire of `intent_id` if it may fire now; False if it may not (another
        message fired it first, it is cooling down, used up, ended or expired). Atomic across
        threads and processes: of two messages at once, exactly one fires it."""
        return bool(self.fire_all([intent_id], now=now, session_key=session_key, excerpt=excerpt))

    def fire_all(
        self, intent_ids: Sequence[int], *, now: float, session_key: str, excerpt: str = ""
    ) -> list[int]:
        """`fire` for several intents in one transaction; returns the ids that fired."""
        return self.repository.fire_all(
            intent_ids, now=now, session_key=session_key, excerpt=excerpt[:200]
        )


def _clean_triggers(triggers: Sequence[str]) -> tuple[list[str], list[tuple[str, ...]]]:
    entries = list(dict.fromkeys(" ".join(str(t).split()) for t in triggers if str(t).strip()))
    if not entries:
        raise IntentError(
            'Give at least one trigger: words that must appear, e.g. ["Hangzhou", "杭州"].'
        )
    if len(entries) > MAX_TRIGGERS:
        raise IntentError(f"At most {MAX_TRIGGERS} triggers per intent; create another intent.")
    terms = [trigger_terms(e) for e in entries]
    empty = [e for e, t in zip(entries, terms, strict=True) if not t]
    if empty:
        raise IntentError(f"The trigger {empty[0]!r} has no words to match; use words or names.")
    if any(len(t) > MAX_TERMS_PER_TRIGGER for t in terms):
        raise IntentError(
            f"A trigger may have at most {MAX_TERMS_PER_TRIGGER} words, all of which must "
            "appear; use a few distinctive ones."
        )
    return entries, terms
