#!/usr/bin/env bash
# Set up (if needed), create ~/.pinch (or $PINCH_HOME), index the memory files, and start Pinch:
# the gateway (Telegram / Slack) when a bot token is set in the environment, else the chat in this
# terminal. `./scripts/start.sh chat` or `./scripts/start.sh gateway` chooses; more arguments are
# passed on (e.g. `./scripts/start.sh chat --session work`). Needs ANTHROPIC_API_KEY, or another
# model in config.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/pinch init
.venv/bin/pinch memory index
if [ "$#" -gt 0 ] && { [ "$1" = chat ] || [ "$1" = gateway ]; }; then
  exec .venv/bin/pinch "$@"
fi
if [ -n "${PINCH_TELEGRAM__BOT_TOKEN:-}${PINCH_SLACK__BOT_TOKEN:-}" ]; then
  exec .venv/bin/pinch gateway "$@"
fi
exec .venv/bin/pinch chat "$@"
