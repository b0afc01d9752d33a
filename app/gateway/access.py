"""Who may talk to the assistant: owners, approved people, allowlists, groups, pairing codes.

    access = Access(owners=Owners.from_settings(settings), channels=channel_settings(settings),
                    pairing=Pairing(SqlitePairingStore(db)))
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

from app.channel_registry import Owners
from channels.base import InboundMessage
from channels.channel_config import DmPolicy, GroupRule
from memory.store.pairing_store import ApprovedSender, PairingRequest, PairingStore

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


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normalise_code(code: str) -> str:
    return code.strip().upper().replace("-", "").replace(" ", "")


class Pairing:
    """Pairing codes and approvals: the rules (code alphabet, an hour's validity, at most
    `MAX_PENDING_PER_CHANNEL` pending per channel) over a `PairingStore` repository."""

    def __init__(self, store: PairingStore, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    def is_approved(self, channel: str, sender_id: str) -> bool:
        return self.store.is_approved(channel, sender_id)

    def latest(self, channel: str, sender_id: str) -> PairingRequest | None:
        """The sender's request of the last hour, whatever its state."""
        return self.store.latest(channel, sender_id, self.clock())

    def request(
        self, channel: str, sender_id: str, sender_name: str | None
    ) -> PairingRequest | None:
        """A new pending code for the sender, or None when the channel already has
        MAX_PENDING_PER_CHANNEL pending (unexpired) codes."""
        return self.store.create_request(
            channel,
            sender_id,
            sender_name,
            new_code(),
            self.clock(),
            ttl_s=CODE_TTL_S,
            max_pending=MAX_PENDING_PER_CHANNEL,
        )

    def pending(self) -> list[PairingRequest]:
        return self.store.pending(self.clock())

    def approved(self) -> list[ApprovedSender]:
        return self.store.approved()

    def decide(self, code: str, approve: bool) -> PairingRequest:
        """Approve or reject the pending request with `code`; ValueError with advice when there
        is no such pending code (wrong, expired or already decided)."""
        code = normalise_code(code)
        decided = self.store.decide(code, approve=approve, now=self.clock())
        if decided is None:
            raise ValueError(
                f"No pending pairing request has the code {code}: codes expire after an hour "
                "and work once. `pinch pairing list` shows the pending ones."
            )
        return decided

    def revoke(self, channel: str, sender_id: str) -> bool:
        return self.store.revoke(channel, sender_id)

    def close(self) -> None:
        self.store.close()


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
        owners: Owners | Mapping[str, Sequence[str]],
        channels: Mapping[str, ChannelAccess],
        pairing: Pairing,
    ) -> None:
        """`owners`: the registry's `Owners`, or a plain mapping channel → ids (tests)."""
        self.owners = owners if isinstance(owners, Owners) else Owners.of(owners)
        self.channels = channels
        self.pairing = pairing

    def is_owner(self, msg: InboundMessage) -> bool:
        return self.owners.is_owner(msg.channel, msg.sender_id)

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
