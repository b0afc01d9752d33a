"""`[web]`: the web control page. A leaf module (pydantic only), so app/config.py can hold it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class WebConfig(BaseModel):
    """`[web]` (env PINCH_WEB__ENABLED, PINCH_WEB__HOST, PINCH_WEB__PORT)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    host: str = "127.0.0.1"  # a non-loopback host needs a password (`pinch web set-password`)
    port: int = Field(default=8765, ge=1, le=65535)
