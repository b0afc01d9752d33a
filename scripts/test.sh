#!/usr/bin/env bash
# Set up (if needed) and run everything CI runs: lint, format check, type check, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/system-deps.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy"
mypy
echo "== pytest"
pytest -q "$@"
