"""Is the process that holds a lease in the database still running? (Leases store a pid, a host
and the time they were taken; a lease whose process is gone may be taken over.)"""

from __future__ import annotations

import os

# /proc/stat's boot time is whole seconds, and a process takes its lease after starting; the
# margin also absorbs a small clock step between the lease and now.
START_SLACK_SECONDS = 5.0


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (another user's process counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_started_at(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), or None where /proc cannot say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as fh:
            boot = next(float(line.split()[1]) for line in fh if line.startswith(b"btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None
