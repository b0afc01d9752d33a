"""Which conversation (session) an inbound message belongs to.

Who the owner is was decided before (app/channel_registry.py `Owners`, through access).

- The owner's direct chats: one main session shared by every channel (`[gateway]
  owner_dm_scope = "main"`, the default), so a conversation started on Telegram continues on
  Slack or in the terminal; or one per channel ("per-channel").
- Every other person: their own direct session per channel, keyed by their platform user id.
- Each group or channel its own session; each thread or forum topic inside it its own.
"""

from __future__ import annotations

from typing import Literal

from channels.base import InboundMessage
from memory.store.sessions import OWNER_PEER, SessionKey


def owner_main_key(agent_id: str) -> SessionKey:
    """The owner's main session (the terminal's own conversation)."""
    return SessionKey.owner_main(agent_id)


def session_key_for(
    msg: InboundMessage,
    *,
    agent_id: str,
    is_owner: bool,
    owner_dm_scope: Literal["main", "per-channel"] = "main",
) -> SessionKey:
    if msg.chat_type == "direct":
        if is_owner:
            if owner_dm_scope == "main" and msg.thread_id is None:
                return owner_main_key(agent_id)
            return SessionKey(agent_id, msg.channel, "direct", OWNER_PEER, msg.thread_id)
        return SessionKey(agent_id, msg.channel, "direct", msg.sender_id, msg.thread_id)
    return SessionKey(agent_id, msg.channel, msg.chat_type, msg.chat_id, msg.thread_id)
