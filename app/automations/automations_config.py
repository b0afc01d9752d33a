"""The settings of automations: `[automations]` and `[heartbeat]`.

A leaf module (pydantic and app/automations/durations.py only), so app/config.py can hold these
sections without importing the scheduler, and the scheduler can read them without app/config.py.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.automations.durations import parse_active_hours, parse_duration


class AutomationsConfig(BaseModel):
    """`[automations]`: reminders and scheduled tasks (app/automations/scheduler.py)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    misfire_grace_s: float = Field(default=3_600.0, ge=0)  # later than this: reported as missed


class HeartbeatConfig(BaseModel):
    """`[heartbeat]`: a periodic check of HEARTBEAT.md's checklist in the owner's main session."""

    model_config = ConfigDict(extra="forbid")

    every: str | None = None  # e.g. "30m"; unset: no heartbeat
    active_hours: str | None = "08:00-22:00"  # in [agent] timezone; unset: around the clock

    @field_validator("every")
    @classmethod
    def _duration(cls, v: str | None) -> str | None:
        if v and parse_duration(v) < 60:
            raise ValueError('the heartbeat runs at most once a minute (e.g. "30m")')
        return v or None

    @field_validator("active_hours")
    @classmethod
    def _hours(cls, v: str | None) -> str | None:
        if v:
            parse_active_hours(v)
        return v or None
