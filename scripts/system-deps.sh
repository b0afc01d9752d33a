#!/usr/bin/env bash
# Install the Debian programs some tests drive for real: Chromium (the web page, through
# Playwright), espeak-ng + ffmpeg (voice notes as Telegram sends them), sox.
# Installs only what is missing, and only where it can (root, or sudo without a password);
# otherwise it says what is missing and the tests that need it are skipped with that reason
# (CI sets PINCH_TEST_STRICT=1, which turns such a skip into a failure).
set -euo pipefail
want=()
command -v chromium >/dev/null 2>&1 || want+=(chromium)
command -v espeak-ng >/dev/null 2>&1 || want+=(espeak-ng)
command -v ffmpeg >/dev/null 2>&1 || want+=(ffmpeg)
command -v sox >/dev/null 2>&1 || want+=(sox)
[ ${#want[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "Not installed (no apt-get here): ${want[*]} — the tests that need them will be skipped." >&2
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "Not installed: ${want[*]}. Install them with: sudo apt-get install ${want[*]}" >&2
  echo "(until then the tests that need them are skipped)" >&2
  exit 0
fi
echo "Installing ${want[*]} (Debian packages) for the tests that drive them ..."
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${want[@]}" >/dev/null \
  || { "${sudo[@]}" apt-get update -q >/dev/null && "${sudo[@]}" apt-get install -y -q --no-install-recommends "${want[@]}" >/dev/null; }
