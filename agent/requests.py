"""The typed way into the agent: an `AgentRequest` in, `AgentEvent`s out.

    request = AgentRequest(key, "What did we decide about the trip?")        # the owner
    request = AgentRequest(group_key, "hi bot", sender="person",
                           sender_id="555", sender_name="Alice")             # someone else
    async for event in agent.run(request):
        match event:
            case TextDelta(text): ...        # reply text as the model streams it
            case Notice(text): ...           # said before the reply (e.g. "session reset")
            case Final(reply): ...           # always last: the stored reply (AgentReply)

`run` is the one entry point (an async iterator, so a channel can await its own platform calls —
a Telegram edit, a Slack `chat.update` — between events without blocking the turn: the turn keeps
running and events queue up). Leaving the loop early (break, cancellation) cancels the turn;
what was stored up to then stays stored. A turn that fails raises its error (`ModelError`, worded
as advice) from the iterator after the events that came before it.

Who sent a message, and why, decides what the turn may see and do (agent/policy.py):
`sender="owner"` (the default), `"person"` (anyone else: a group member, an approved contact),
`"automation"` (a scheduled job or hook acting for the owner) or `"system"` (Pinch itself).
Only the owner's words are stored as the owner's: other senders are stored with the message and
shown to the model as "[from Alice (telegram 555)] …", "[automation: daily digest] …".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agent.types import Usage
from common.attachment import Attachment
from memory.store.sessions import SessionKey

SenderKind = Literal["owner", "person", "automation", "system"]
SENDER_KINDS: tuple[SenderKind, ...] = ("owner", "person", "automation", "system")


@dataclass(frozen=True)
class AgentRequest:
    """One message for the agent: where it was said, what, by whom, and what came with it."""

    key: SessionKey
    text: str
    sender: SenderKind = "owner"
    sender_id: str | None = None  # platform user id, job id, …; shown, never trusted for access
    sender_name: str | None = None  # display name
    attachments: tuple[Attachment, ...] = ()
    message_ids: tuple[str, ...] = ()  # the platform's ids of the message(s) answered
    # The channel the message arrived on, when it differs from the session's (the owner's one
    # main session is keyed "cli" but answers Telegram and Slack too): picks the format hint.
    channel: str | None = None
    # The same messages were handed to the agent before a restart (the gateway's queue knows):
    # the turn is finished from what was stored then — the message is not stored twice, and a
    # stored final answer is returned as it is, without a model call.
    resumed: bool = False

    def __post_init__(self) -> None:
        if self.sender not in SENDER_KINDS:
            raise ValueError(f"sender must be one of {SENDER_KINDS}, not {self.sender!r}")
        if self.sender == "person" and self.key.is_owner_direct:
            # The gateway maps only the owner's identities to the owner's direct chat; anything
            # else here is a routing bug that would hand a stranger the owner's memory.
            raise ValueError(f"A person other than the owner cannot write in {self.key}.")

    @classmethod
    def from_owner(cls, key: SessionKey, text: str) -> AgentRequest:
        return cls(key, text)


@dataclass(frozen=True)
class AgentReply:
    """What to show. `text` includes any notice (e.g. that a session was reset)."""

    text: str
    session_id: str
    usage: Usage = field(default_factory=Usage)  # every model call of the turn, flush included
    model: str | None = None  # the model that answered
    command: str | None = None  # "/new", "/status", … when the message was a slash command
    compacted: bool = False
    cut_off: bool = False  # the answer stopped early (it ends with a notice saying so)


@dataclass(frozen=True)
class TextDelta:
    """A piece of the reply as the model streams it."""

    text: str


@dataclass(frozen=True)
class Notice:
    """Something to say before the reply (a session reset, a fresh session for "/new …")."""

    text: str


@dataclass(frozen=True)
class Final:
    """The turn is done and stored; always the last event."""

    reply: AgentReply


AgentEvent = TextDelta | Notice | Final
