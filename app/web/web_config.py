"""`[web]`: the web control page. A leaf module (pydantic only), so app/config.py can hold it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class WebConfig(BaseModel):
    """`[web]` (env PINCH_WEB__ENABLED, PINCH_WEB__HOST, PINCH_WEB__PORT, …)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    host: str = "127.0.0.1"  # a non-loopback host needs a password (`pinch web set-password`)
    port: int = Field(default=8765, ge=1, le=65535)
    # How long a login lasts in one browser (logout ends it sooner).
    session_hours: float = Field(default=24.0, gt=0, le=24 * 30)
    # Other names the page may be reached by (a Tailscale name, a reverse proxy's host):
    # requests whose Host header is none of these, nor `host` nor a loopback name, are refused.
    allowed_hosts: list[str] = Field(default_factory=list)

    @property
    def loopback(self) -> bool:
        return self.host.strip("[]") in LOOPBACK_HOSTS or self.host.startswith("127.")

    def needed_secrets(self) -> dict[str, bool]:
        """No secret from the environment (`pinch doctor`): the page's password, when there is
        one, is a scrypt hash in the Pinch home (`pinch web set-password`)."""
        return {}
