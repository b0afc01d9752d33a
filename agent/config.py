"""Settings of the agent: which model, how big its context is, when to compact.

`app.config.Settings` embeds an `AgentConfig` under `[agent]` in config.toml (as it embeds
`memory.config.MemoryConfig` under `[memory]`); the agent package itself never reads files or the
environment for configuration.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agent.model import DEFAULT_MODEL


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
