"""Which channels exist: one row per channel, plain data (the behaviour is app/channel_registry.py).

A new channel is one row here. Everything that lists channels reads this table: the gateway's
adapters, access (owner ids, access settings), the owner's chats for the scheduler and the
schedule tool, the privacy policy's owner sessions (agent/policy.py), and `pinch doctor`.
Plain strings only, so every package may read it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChannelRow:
    """One channel.

        `adapter` is "module:Class" of its `Channel` adapter (imported only when the channel runs;
        None: the channel is not run by the gateway, e.g. the terminal). `config_section` is its
        settings section (`[telegram]`, also `Settings.telegram`); `owners_key` its list in
        `[owners]`; `token_variable` the environment variable of the token that turns it on. A
        channel's owner ids also address the owner's direct chat (a Telegram private chat's id is
        the user's id; Slack accepts a user id as a DM channel). A channel without `token_variable`
    runs when its section's `enabled` is true (the web page)."""

    name: str
    title: str
    adapter: str | None = None
    config_section: str | None = None
    owners_key: str | None = None
    token_variable: str | None = None
    # Its only user is the owner (the terminal's machine; the web page behind its login).
    always_owner: bool = False
    # False: it shows only what arrives while it is open (the terminal, the web page), so a
    # job asked for there is delivered to the owner's chat on a platform instead.
    reachable_later: bool = True


TERMINAL = "cli"  # the channel of `pinch chat`: its user is always the owner
WEB = "web"  # the web page's chat (app/web): its user is the logged-in owner

CHANNELS: tuple[ChannelRow, ...] = (
    ChannelRow(TERMINAL, "Terminal", always_owner=True, reachable_later=False),
    ChannelRow(
        "telegram",
        "Telegram",
        adapter="channels.telegram.adapter:TelegramChannel",
        config_section="telegram",
        owners_key="telegram",
        token_variable="PINCH_TELEGRAM__BOT_TOKEN",
    ),
    ChannelRow(
        "slack",
        "Slack",
        adapter="channels.slack.adapter:SlackChannel",
        config_section="slack",
        owners_key="slack",
        token_variable="PINCH_SLACK__BOT_TOKEN",
    ),
    ChannelRow(
        WEB,
        "Web page",
        adapter="channels.web:WebChannel",
        config_section="web",
        always_owner=True,
        reachable_later=False,
    ),
)


def channel_names() -> tuple[str, ...]:
    """Every channel's name, in the table's order ("cli" first)."""
    return tuple(row.name for row in CHANNELS)


def always_owner(name: str) -> bool:
    """Whether channel `name`'s only user is the owner (the terminal, the web page)."""
    return any(row.always_owner for row in CHANNELS if row.name == name)


def reachable_later(name: str) -> bool:
    """Whether a message sent to channel `name` later (a job's result) reaches anyone."""
    return all(row.reachable_later for row in CHANNELS if row.name == name)


def messaging(name: str) -> bool:
    """Whether channel `name` is a messaging platform with its own account (Telegram, Slack),
    as opposed to the owner's local ways in (the terminal, the web page). The gateway's health
    and its "no channel could start" rule are about these."""
    return any(row.token_variable is not None for row in CHANNELS if row.name == name)
