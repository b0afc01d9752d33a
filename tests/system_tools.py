"""The Debian programs some tests drive for real (scripts/system-deps.sh installs them).

A test that needs one calls `need("ffmpeg")`: missing, it is skipped with the reason — or fails,
under PINCH_TEST_STRICT=1 (CI), where skipping would hide an untested feature.
"""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = "/usr/bin/chromium"


def need(program: str) -> str:
    """The path of `program`, or skip (fail in CI) saying how to install it."""
    path = shutil.which(program)
    if path is None and program == "chromium" and os.path.exists(CHROMIUM):
        path = CHROMIUM
    if path:
        return path
    why = (
        f"{program} is not installed (./scripts/system-deps.sh, or: sudo apt-get install {program})"
    )
    if os.environ.get("PINCH_TEST_STRICT"):
        pytest.fail(why)
    pytest.skip(why)
