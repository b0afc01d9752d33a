"""`python -m tests.gateway_child RELAY_URL`: `pinch gateway` with its "telegram" channel replaced
by a RelayChannel to the test's relay server (everything else as the real command runs it)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from app.cli.setup import initialise
from app.config import load_settings
from app.gateway.run import GatewayError, configure_logging, run_gateway
from tests.fakes.relay_server import RelayChannel

TEMPLATE = Path(__file__).resolve().parents[1] / "workspace_template"


def main() -> int:
    settings = load_settings()
    if not settings.workspace_dir.exists():
        initialise(settings, TEMPLATE)
    configure_logging(settings)
    channel = RelayChannel("telegram", sys.argv[1])
    try:
        return asyncio.run(run_gateway(settings, extra_channels={"telegram": channel}))
    except GatewayError as exc:
        print(exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
