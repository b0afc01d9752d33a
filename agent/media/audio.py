"""How long a recording is, when the platform did not say: ffprobe when it is installed, else
the container's own header (WAV; Ogg Opus or Vorbis, from the last page's granule position).
None when it cannot be told — the turn goes on without it."""

from __future__ import annotations

import shutil
import struct
import subprocess
import wave
from pathlib import Path

_OGG_TAIL = 65_536


def audio_duration(path: Path) -> float | None:
    """Seconds of audio in `path`, or None when unknown. Blocks (at most a few seconds)."""
    seconds = _ffprobe(path)
    if seconds is None:
        seconds = _from_header(path)
    return seconds


def _ffprobe(path: Path) -> float | None:
    program = shutil.which("ffprobe")
    if program is None:
        return None
    try:
        done = subprocess.run(
            [program, "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", path],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return float(done.stdout.strip()) if done.returncode == 0 else None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def _from_header(path: Path) -> float | None:
    try:
        with path.open("rb") as f:
            head = f.read(4096)
            if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
                f.seek(0)
                with wave.open(f) as w:
                    return w.getnframes() / float(w.getframerate())
            if head[:4] == b"OggS":
                rate = _ogg_rate(head)
                if rate is None:
                    return None
                size = path.stat().st_size
                f.seek(max(0, size - _OGG_TAIL))
                return _last_granule(f.read()) / rate if rate else None
    except (OSError, EOFError, wave.Error, struct.error, ZeroDivisionError):
        return None
    return None


def _ogg_rate(head: bytes) -> int | None:
    if b"OpusHead" in head:
        return 48_000  # Opus granules always count 48 kHz samples
    at = head.find(b"\x01vorbis")
    if at >= 0 and len(head) >= at + 16:
        return int(struct.unpack_from("<I", head, at + 12)[0]) or None
    return None


def _last_granule(tail: bytes) -> int:
    at = tail.rfind(b"OggS")
    while at >= 0:
        if len(tail) >= at + 14:
            granule = int(struct.unpack_from("<q", tail, at + 6)[0])
            if granule >= 0:
                return granule
        at = tail.rfind(b"OggS", 0, at)
    return 0
