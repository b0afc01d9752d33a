"""Files that came with messages land in one inbox: one sanitiser, 0600 files in 0700 folders,
folders dated in the owner's time zone."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from memory.files.inbox import Inbox, safe_file_name


def test_a_file_is_saved_0600_in_a_0700_dated_folder_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        rel = Inbox(tmp_path, tz=UTC).save("a.txt", b"hello", datetime(2026, 12, 1, 9, tzinfo=UTC))
    finally:
        os.umask(previous)
    assert rel == "inbox/2026-12-01/a.txt"
    assert (tmp_path / rel).read_bytes() == b"hello"
    assert stat.S_IMODE((tmp_path / rel).stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "inbox" / "2026-12-01").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "inbox").stat().st_mode) == 0o700


def test_the_folder_is_the_day_in_the_owners_zone(tmp_path: Path) -> None:
    late_utc = datetime(2026, 12, 1, 23, 30, tzinfo=UTC)  # already Dec 2 in Berlin
    rel = Inbox(tmp_path, tz=ZoneInfo("Europe/Berlin")).save("x.jpg", b"x", late_utc)
    assert rel == "inbox/2026-12-02/x.jpg"


def test_no_name_leaves_its_folder_or_hides() -> None:
    for name in ("../../../etc/passwd", "/etc/passwd", ".hidden", "..", "", "a/../../b"):
        safe = safe_file_name(name)
        assert safe and "/" not in safe and not safe.startswith(".") and safe != ".."
    assert safe_file_name("Q3 report.pdf") == "Q3_report.pdf"


def test_a_long_name_keeps_its_extension_and_fits_a_file_system() -> None:
    safe = safe_file_name("ü" * 300 + ".pdf")
    assert safe.endswith(".pdf") and len(safe.encode()) <= 200
