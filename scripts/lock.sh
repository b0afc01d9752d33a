#!/usr/bin/env bash
# Re-pin the dependencies (after changing pyproject.toml): requirements.lock (everything, with the
# dev extra: what setup.sh and the tests install) and requirements-runtime.lock (what the
# container installs: the same versions and hashes, without the test and lint tools).
set -euo pipefail
cd "$(dirname "$0")/.."
# --no-strip-extras: a pin keeps the extras a dependency asks for (litellm wants httpx[http2]);
# without them pip's --require-hashes mode looks past the pin for the newest httpx and refuses.
uv pip compile pyproject.toml --extra dev --generate-hashes --no-strip-extras --python-version 3.11 \
  -o requirements.lock
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
grep -E '^[a-z0-9].*==' requirements.lock | sed 's/ \\$//; s/\[[^]]*\]//' > "$constraints"
uv pip compile pyproject.toml --generate-hashes --no-strip-extras --python-version 3.11 -c "$constraints" \
  --no-header --no-annotate -o requirements-runtime.lock
sed -i '1i # The runtime subset of requirements.lock (same versions and hashes), made by scripts/lock.sh.' \
  requirements-runtime.lock
