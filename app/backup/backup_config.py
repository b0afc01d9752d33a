"""The settings of scheduled backups: `[backup]`.

A leaf module (pydantic and app/automations/durations.py only), so app/config.py can hold the
section without importing the archive code.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.automations.durations import parse_duration

MIN_EVERY_S = 60  # as the heartbeat: at most once a minute (daily is the sense of it)


class BackupConfig(BaseModel):
    """`[backup]`: the archives `pinch gateway` makes on its own (app/backup/schedule.py)."""

    model_config = ConfigDict(extra="forbid")

    every: str | None = "1d"  # e.g. "1d", "12h"; empty: no scheduled backups
    keep: int = Field(default=7, ge=1, le=1000)  # the newest N scheduled archives are kept
    path: Path | None = None  # where archives go; default <home>/backups

    @field_validator("every")
    @classmethod
    def _duration(cls, v: str | None) -> str | None:
        if v and v.strip().lower() not in ("off", "none") and parse_duration(v) < MIN_EVERY_S:
            raise ValueError('backups run at most once a minute (e.g. "1d", "12h"; "" for none)')
        return v if v and v.strip().lower() not in ("off", "none") else None

    def every_s(self) -> int | None:
        return parse_duration(self.every) if self.every else None
