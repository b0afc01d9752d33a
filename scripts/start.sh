#!/usr/bin/env bash
# Set up (if needed), create ~/.pinch (or $PINCH_HOME), index the memory files, and start
# talking to Pinch in the terminal. Needs ANTHROPIC_API_KEY, or another model in config.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/pinch init
.venv/bin/pinch memory index
exec .venv/bin/pinch chat "$@"
