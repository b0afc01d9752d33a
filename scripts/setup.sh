#!/usr/bin/env bash
# Create .venv and install Pinch with the exact, hash-checked dependencies of requirements.lock.
# Safe to run again: it only installs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "Pinch needs Python 3.11 or newer; '$PYTHON' is $("$PYTHON" --version 2>&1). Set PYTHON=/path/to/python3.11." >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  if ! "$PYTHON" -m venv .venv; then
    rm -rf .venv
    echo "Could not create .venv with '$PYTHON -m venv'. On Debian/Ubuntu install the venv module" >&2
    echo "first (sudo apt install python3-venv), or set PYTHON=/path/to/python3.11." >&2
    exit 1
  fi
fi
stamp=.venv/.pinch-lock-hash
want=$(sha256sum requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
  echo "$want" > "$stamp"
fi
