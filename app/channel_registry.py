"""The one owner and channel registry: which channels exist, who the owner is on each, which
chat reaches the owner.

    owners = Owners.from_settings(settings)
    owners.is_owner("telegram", "111")       # the terminal user always is
    owners.chats()                           # the owner's direct chat per channel, in table order
    owners.route(key)                        # where a job asked for in `key` is delivered

The channels themselves are the rows of common/channel_table.py (plain data, so agent/policy.py
reads them too); this module adds what needs settings: the owners, each channel's settings
section, and its adapter class. A new channel is one row in that table.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.channel_table import CHANNELS, TERMINAL, ChannelRow, always_owner
from memory.store.jobs_store import Target
from memory.store.sessions import SessionKey

__all__ = ["CHANNELS", "TERMINAL", "ChannelRow", "Owners", "adapter_class", "channel_row"]


def channel_row(name: str) -> ChannelRow | None:
    """The row of channel `name`, or None for a channel that does not exist."""
    return next((row for row in CHANNELS if row.name == name), None)


def adapter_class(row: ChannelRow) -> Any:
    """The `Channel` adapter class of `row` (imports its platform library)."""
    if row.adapter is None:
        raise ValueError(f"The {row.title} channel has no gateway adapter.")
    module, _, name = row.adapter.partition(":")
    return getattr(importlib.import_module(module), name)


def channel_settings(settings: Any) -> dict[str, Any]:
    """Each channel's settings section (`settings.telegram`, …), by channel name."""
    return {
        row.name: getattr(settings, row.config_section) for row in CHANNELS if row.config_section
    }


@dataclass(frozen=True)
class Owners:
    """The owner's user ids on each channel (`[owners]`), in the channel table's order."""

    ids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, ids: Mapping[str, Sequence[str]]) -> Owners:
        """From a plain mapping (channel name → ids), e.g. {"telegram": ["111"]}."""
        ordered = {row.name: tuple(ids[row.name]) for row in CHANNELS if ids.get(row.name)}
        return cls(ordered)

    @classmethod
    def from_settings(cls, settings: Any) -> Owners:
        """From `settings.owners` (the `[owners]` section)."""
        return cls.of(
            {
                row.name: getattr(settings.owners, row.owners_key)
                for row in CHANNELS
                if row.owners_key
            }
        )

    def is_owner(self, channel: str, sender_id: str) -> bool:
        """Whether `sender_id` on `channel` is the owner (the terminal's and the web page's
        user always is: the owner's own machine, the page behind the owner's login)."""
        if always_owner(channel):
            return True
        return sender_id in self.ids.get(channel, ())

    def chats(self) -> tuple[Target, ...]:
        """The owner's direct chat on each channel with an id in `[owners]`, in table order
        (Telegram first): where an owner's job goes when the terminal asked for it, and
        where alerts go when a job's own chat fails."""
        return tuple(Target(channel, ids[0]) for channel, ids in self.ids.items() if ids)

    def route(self, key: SessionKey) -> Target | None:
        """The chat that reaches the conversation `key`: another person's or a group's own
        chat; for the owner's direct chat, the owner's chat on that channel (in the shared
        "main" session, keyed on the terminal, the first channel with an owner id); None when
        no owner id is set for it."""
        if not key.is_owner_direct:
            if key.chat_type == "direct":
                return Target(key.channel, key.peer_id)
            return Target(key.channel, key.peer_id, key.thread_id)
        chats = self.chats()
        if key.channel != TERMINAL:
            chats = tuple(c for c in chats if c.channel == key.channel)
        return chats[0] if chats else None
