"""Settings of the platform adapters: the `[telegram]` and `[slack]` tables of config.toml.

`app.config.Settings` embeds them; tokens and secrets come only from the environment
(`PINCH_TELEGRAM__BOT_TOKEN`, `PINCH_SLACK__BOT_TOKEN`, `PINCH_SLACK__APP_TOKEN`, …) — a secret
in config.toml is refused with a message saying which variable to set. A channel whose token is
unset is not started. Who may talk to the assistant (`dm_policy`, `allow_from`, `groups`) is read
by the gateway's access control; the adapters only report who sent what.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

DmPolicy = Literal["pairing", "allowlist", "open", "disabled"]
SECRET_FIELDS = {
    "telegram": ("bot_token", "webhook_secret"),
    "slack": ("bot_token", "app_token", "signing_secret"),
}


class GroupRule(BaseModel):
    """One allowed group/channel: whether the bot needs a mention, and who in it may talk."""

    model_config = ConfigDict(extra="forbid")

    require_mention: bool = True
    allow_from: list[str] = Field(default_factory=list)  # sender ids; empty: anyone in the group


class _ChannelAccess(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Direct messages from people who are not owners: pairing (a code the owner approves),
    # allowlist (only `allow_from`), open (anyone), disabled (owners only).
    dm_policy: DmPolicy = "pairing"
    allow_from: list[str] = Field(default_factory=list)  # stable user ids, never usernames
    # Groups/channels the bot answers in, by chat id; none configured means no groups.
    groups: dict[str, GroupRule] = Field(default_factory=dict)

    @field_validator("allow_from")
    @classmethod
    def _ids_not_names(cls, v: list[str]) -> list[str]:
        for item in v:
            if item.startswith("@"):
                raise ValueError(
                    f"{item!r} is a username; allowlists hold stable user ids (e.g. 123456789 on "
                    "Telegram, U0123ABCD on Slack), because usernames can change hands"
                )
        return v


class TelegramConfig(_ChannelAccess):
    """The `[telegram]` table."""

    bot_token: SecretStr | None = None  # environment only: PINCH_TELEGRAM__BOT_TOKEN
    api_base_url: str = "https://api.telegram.org"
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str | None = None  # public https URL Telegram posts to (webhook mode)
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = Field(default=8443, ge=1, le=65535)
    webhook_secret: SecretStr | None = None  # environment only: PINCH_TELEGRAM__WEBHOOK_SECRET
    # Messages sent while the gateway was down: process them (False) or drop them (True).
    drop_pending_updates: bool = False
    poll_timeout_s: int = Field(default=30, ge=0, le=50)  # getUpdates long-poll timeout
    poll_stall_s: float = Field(default=120.0, gt=0)  # rebuild polling after this long deaf
    max_download_mb: int = Field(default=20, ge=1)  # the Bot API's getFile limit is 20 MB
    # A file's download may take this long, plus 1 s per 200 KB of it (messages behind it wait).
    download_timeout_s: float = Field(default=20.0, gt=0, le=600)
    # An album arrives as one update per photo; parts this far apart still make one message.
    media_group_wait_s: float = Field(default=1.0, gt=0, le=10)

    def needed_secrets(self) -> dict[str, bool]:
        """The environment variables this configuration needs, each with whether it is set
        (`pinch doctor`; values are never shown). Nothing when the channel is off."""
        if self.bot_token is None:
            return {}
        needed = {"PINCH_TELEGRAM__BOT_TOKEN": bool(self.bot_token.get_secret_value())}
        if self.mode == "webhook":
            needed["PINCH_TELEGRAM__WEBHOOK_SECRET"] = self.webhook_secret is not None
        return needed

    @model_validator(mode="after")
    def _stall_outlasts_a_poll(self) -> TelegramConfig:
        if self.poll_stall_s <= self.poll_timeout_s:
            raise ValueError(
                f"poll_stall_s ({self.poll_stall_s:g}) must be longer than poll_timeout_s "
                f"({self.poll_timeout_s}): a quiet long poll is not a stall"
            )
        return self


class SlackConfig(_ChannelAccess):
    """The `[slack]` table."""

    bot_token: SecretStr | None = None  # environment only: PINCH_SLACK__BOT_TOKEN (xoxb-…)
    app_token: SecretStr | None = None  # environment only: PINCH_SLACK__APP_TOKEN (xapp-…)
    api_base_url: str = "https://slack.com/api/"
    mode: Literal["socket", "events"] = "socket"
    signing_secret: SecretStr | None = None  # environment only (events mode)
    events_listen: str = "127.0.0.1"
    events_port: int = Field(default=3000, ge=1, le=65535)
    dedup_ttl_s: float = Field(default=3600.0, ge=600)  # outlives Slack's retries (≥ 10 min)
    max_download_mb: int = Field(default=20, ge=1)  # bigger shared files are not downloaded
    timeout_s: float = Field(
        default=30.0, gt=0
    )  # per Web API call; a timed-out post is not retried
    ping_interval_s: float = Field(default=10.0, gt=0)  # Socket Mode liveness ping

    def needed_secrets(self) -> dict[str, bool]:
        """The environment variables this configuration needs, each with whether it is set
        (`pinch doctor`; values are never shown). Nothing when the channel is off."""
        if self.bot_token is None and self.app_token is None:
            return {}
        needed = {"PINCH_SLACK__BOT_TOKEN": self.bot_token is not None}
        if self.mode == "socket":
            needed["PINCH_SLACK__APP_TOKEN"] = self.app_token is not None
        else:
            needed["PINCH_SLACK__SIGNING_SECRET"] = self.signing_secret is not None
        return needed
