"""Settings of the agent: which model, how big its context is, when to compact.

`app.config.Settings` embeds an `AgentConfig` under `[agent]` in config.toml (as it embeds
`memory.memory_config.MemoryConfig` under `[memory]`); the agent package itself never reads files
or the
environment for configuration.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent.model.factory import DEFAULT_MODEL
from common.clock import load_timezone

# Below this many tokens between the system prompt and the flush threshold, every turn would
# flush memory and compact; a window that small is a typo, refused at load.
MIN_CONVERSATION_TOKENS = 2_000


class AgentConfig(BaseModel):
    """The `[agent]` table of config.toml."""

    model_config = ConfigDict(extra="forbid")

    model: str = DEFAULT_MODEL
    fallback_models: list[str] = Field(default_factory=list)
    api_base: str | None = None
    context_window: int = Field(default=200_000, ge=4_000)
    # The memory flush and compaction start when the context would pass
    # context_window - reserve_floor - soft_threshold tokens.
    reserve_floor: int = Field(default=20_000, ge=0)
    soft_threshold: int = Field(default=4_000, ge=0)
    max_output_tokens: int = Field(default=4_096, ge=64)
    timeout_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=3, ge=0, le=10)
    timezone: str | None = None  # IANA name; default: the machine's
    # Share of (context_window - reserve_floor) that compaction keeps as recent verbatim turns.
    keep_recent_share: float = Field(default=0.3, gt=0, lt=1)
    max_tool_rounds: int = Field(default=8, ge=1, le=50)
    bootstrap_max_chars: int = Field(default=20_000, ge=1_000)  # per bootstrap file
    bootstrap_total_max_chars: int = Field(default=60_000, ge=1_000)
    slug_timeout_s: float = Field(default=10.0, gt=0)  # session-note name; HHMM when slower
    # Active Memory (agent/active_memory.py): "off" — nothing; "triggers" — trigger-tagged
    # entries of MEMORY.md/USER.md only (no model call); "escalate" — and a deep recall
    # sub-call when a message asks about the past; "always" — deep recall on every owner turn.
    recall_mode: Literal["off", "triggers", "escalate", "always"] = "escalate"
    recall_timeout_s: float = Field(default=8.0, gt=0, le=60)  # deep recall, hard limit

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, name: str | None) -> str | None:
        # Checked at load, so every command (not only chat) refuses an unknown zone.
        if name:
            load_timezone(name)
        return name or None

    @model_validator(mode="after")
    def _window_leaves_room(self) -> Self:
        room = self.context_window - self.reserve_floor - self.soft_threshold
        if room < MIN_CONVERSATION_TOKENS:
            raise ValueError(
                f"context_window = {self.context_window:,} leaves {room:,} tokens after "
                f"reserve_floor ({self.reserve_floor:,}) and soft_threshold "
                f"({self.soft_threshold:,}); at least {MIN_CONVERSATION_TOKENS:,} are needed or "
                "every turn flushes and compacts. Raise context_window to at least "
                f"{self.reserve_floor + self.soft_threshold + MIN_CONVERSATION_TOKENS:,} or lower "
                "the other two"
            )
        return self
