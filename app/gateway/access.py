"""Who may talk to the assistant: owners, approved people, allowlists, groups, pairing codes.

    access = Access(owners={"telegram": ["111"]}, channels={"telegram": settings.telegram},
                    pairing=PairingStore(db))
    decision = access.check(msg)   # answer (as "owner"/"person"), reply (pairing), or ignore

Direct messages follow the channel's `dm_policy`: `pairing` (default: an unknown sender gets an
8-character code the owner approves with `pinch pairing approve CODE`; nothing else happens, no
model call), `allowlist` (only `allow_from`), `open` (anyone), `disabled` (owners only). Owners
(`[owners]`, and the terminal user) always pass. Groups need their own entry in `groups` (no entry:
ignored), a mention unless `require_mention = false`, and a sender in the group's `allow_from`
when that is set; pairing grants direct messages only. Codes are never logged.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from app.gateway.schema import GATEWAY
from channels.base import InboundMessage
from channels.channel_config import DmPolicy, GroupRule
from memory.store.db import Database
from memory.store.schema import apply

log = logging.getLogger(__name__)

CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: read aloud or typed safely
CODE_LENGTH = 8
CODE_TTL_S = 3600.0
MAX_PENDING_PER_CHANNEL = 3

Role = Literal["owner", "person"]


class ChannelAccess(Protocol):
    """The access settings of one channel (`[telegram]`, `[slack]`)."""

    dm_policy: DmPolicy
    allow_from: list[str]
    groups: dict[str, GroupRule]


@dataclass(frozen=True)
class Decision:
    """`answer`: queue the message for a turn as `role`; `reply`: send `text` and nothing else;
    `ignore`: drop it (`reason` is for the log, never a code; `routine`: the expected silence —
    a bot, a group message without a mention — not worth telling the owner about)."""

    action: Literal["answer", "reply", "ignore"]
    role: Role = "person"
    text: str = ""
    reason: str = ""
    routine: bool = False


@dataclass(frozen=True)
class PairingRequest:
    code: str
    channel: str
    sender_id: str
    sender_name: str | None
    state: str
    created_at: float
    expires_at: float


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normalise_code(code: str) -> str:
    return code.strip().upper().replace("-", "").replace(" ", "")


class PairingStore:
    """Pairing requests and approvals in the agent database (the gateway's tables)."""

    def __init__(self, db: Database, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock
        with db.lock:
            apply(db.conn, GATEWAY)

    def is_approved(self, channel: str, sender_id: str) -> bool:
        rows = self.db.execute(
            "SELECT 1 FROM approved_senders WHERE channel = ? AND sender_id = ?",
            (channel, sender_id),
        )
        return bool(rows)

    def latest(self, channel: str, sender_id: str) -> PairingRequest | None:
        """The sender's request of the last hour, whatever its state."""
        rows = self.db.execute(
            f"SELECT {_COLUMNS} FROM pairing_requests WHERE channel = ? AND sender_id = ? "
            "AND expires_at > ? ORDER BY created_at DESC LIMIT 1",
            (channel, sender_id, self.clock()),
        )
        return _request(rows[0]) if rows else None

    def request(
        self, channel: str, sender_id: str, sender_name: str | None
    ) -> PairingRequest | None:
        """A new pending code for the sender, or None when the channel already has
        MAX_PENDING_PER_CHANNEL pending (unexpired) codes."""
        now = self.clock()
        with self.db.transaction() as conn:
            (pending,) = conn.execute(
                "SELECT count(*) FROM pairing_requests WHERE channel = ? AND state = 'pending' "
                "AND expires_at > ?",
                (channel, now),
            ).fetchone()
            if pending >= MAX_PENDING_PER_CHANNEL:
                return None
            code = new_code()
            conn.execute(
                "INSERT INTO pairing_requests (channel, sender_id, sender_name, code, state, "
                "created_at, expires_at) VALUES (?, ?, ?, ?, 'pending', ?, ?)",
                (channel, sender_id, sender_name, code, now, now + CODE_TTL_S),
            )
        expires = now + CODE_TTL_S
        return PairingRequest(code, channel, sender_id, sender_name, "pending", now, expires)

    def pending(self) -> list[PairingRequest]:
        rows = self.db.execute(
            f"SELECT {_COLUMNS} FROM pairing_requests WHERE state = 'pending' AND expires_at > ? "
            "ORDER BY created_at",
            (self.clock(),),
        )
        return [_request(r) for r in rows]

    def approved(self) -> list[tuple[str, str, str | None, float]]:
        rows = self.db.execute(
            "SELECT channel, sender_id, sender_name, approved_at FROM approved_senders "
            "ORDER BY approved_at"
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    def decide(self, code: str, approve: bool) -> PairingRequest:
        """Approve or reject the pending request with `code`; ValueError with advice when there
        is no such pending code (wrong, expired or already decided)."""
        code = normalise_code(code)
        now = self.clock()
        with self.db.transaction() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM pairing_requests WHERE code = ? AND state = 'pending' "
                "AND expires_at > ?",
                (code, now),
            ).fetchone()
            if row is None:
                raise ValueError(
                    f"No pending pairing request has the code {code}: codes expire after an hour "
                    "and work once. `pinch pairing list` shows the pending ones."
                )
            req = _request(row)
            state = "approved" if approve else "rejected"
            conn.execute(
                "UPDATE pairing_requests SET state = ?, decided_at = ? WHERE code = ? "
                "AND state = 'pending'",
                (state, now, code),
            )
            if approve:
                conn.execute(
                    "INSERT OR REPLACE INTO approved_senders VALUES (?, ?, ?, ?)",
                    (req.channel, req.sender_id, req.sender_name, now),
                )
        return PairingRequest(
            req.code,
            req.channel,
            req.sender_id,
            req.sender_name,
            state,
            req.created_at,
            req.expires_at,
        )

    def revoke(self, channel: str, sender_id: str) -> bool:
        with self.db.transaction() as conn:
            cur = conn.execute(
                "DELETE FROM approved_senders WHERE channel = ? AND sender_id = ?",
                (channel, sender_id),
            )
            return bool(cur.rowcount)


_COLUMNS = "code, channel, sender_id, sender_name, state, created_at, expires_at"


def _request(row: Sequence[object]) -> PairingRequest:
    return PairingRequest(*row)  # type: ignore[arg-type]


def pairing_notice(code: str) -> str:
    return (
        "Hi! I only talk to people my owner has approved. To ask for access, give my owner this "
        f"code: {code}\n(They approve it with `pinch pairing approve {code}`; it is valid for "
        "1 hour.)"
    )


STILL_PENDING = "Your request is still waiting for my owner's approval (code {code})."


class Access:
    """Decides, without any model call, what happens to an inbound message."""

    def __init__(
        self,
        *,
        owners: Mapping[str, Sequence[str]],
        channels: Mapping[str, ChannelAccess],
        pairing: PairingStore,
    ) -> None:
        self.owners = {name: frozenset(ids) for name, ids in owners.items()}
        self.channels = channels
        self.pairing = pairing

    def is_owner(self, msg: InboundMessage) -> bool:
        if msg.channel == "cli":  # the terminal is the owner's own machine
            return True
        return msg.sender_id in self.owners.get(msg.channel, frozenset())

    def check(self, msg: InboundMessage) -> Decision:
        """What to do with `msg` (may write a pairing request; never calls the model)."""
        if msg.is_bot:
            return Decision("ignore", reason="sent by a bot", routine=True)
        owner = self.is_owner(msg)
        if msg.chat_type != "direct":
            return self._check_group(msg, owner)
        if owner:
            return Decision("answer", role="owner")
        config = self.channels.get(msg.channel)
        policy: DmPolicy = config.dm_policy if config else "pairing"
        allow = config.allow_from if config else []
        if policy == "disabled":
            return Decision("ignore", reason="direct messages are disabled on this channel")
        if policy == "open" or msg.sender_id in allow:
            return Decision("answer")
        if policy == "allowlist":
            return Decision("ignore", reason="sender not in allow_from (dm_policy allowlist)")
        if self.pairing.is_approved(msg.channel, msg.sender_id):
            return Decision("answer")
        return self._pair(msg)

    def _check_group(self, msg: InboundMessage, owner: bool) -> Decision:
        config = self.channels.get(msg.channel)
        rule = config.groups.get(msg.chat_id) if config else None
        if rule is None:
            return Decision("ignore", reason="group not listed in the channel's groups")
        if rule.allow_from and not owner and msg.sender_id not in rule.allow_from:
            return Decision("ignore", reason="sender not in the group's allow_from")
        if rule.require_mention and not msg.mentioned:
            return Decision("ignore", reason="not mentioned", routine=True)
        return Decision("answer", role="owner" if owner else "person")

    def _pair(self, msg: InboundMessage) -> Decision:
        latest = self.pairing.latest(msg.channel, msg.sender_id)
        if latest is not None:  # one code per sender per hour
            if latest.state == "pending":
                return Decision("reply", text=STILL_PENDING.format(code=latest.code))
            return Decision("ignore", reason=f"pairing request {latest.state} within the hour")
        request = self.pairing.request(msg.channel, msg.sender_id, msg.sender_name)
        if request is None:
            return Decision("ignore", reason="too many pending pairing requests on this channel")
        log.info("New pairing request on %s from sender %s", msg.channel, msg.sender_id)
        return Decision("reply", text=pairing_notice(request.code))
