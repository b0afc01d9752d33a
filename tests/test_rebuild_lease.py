"""A rebuild lease left by a killed process is stale even when a new process got the same pid.

In a container the gateway restarts with the same pid and host name; a lease judged only by
"does that pid exist" would then look alive — held by the restarted process itself — and every
rebuild would wait for the 10-minute heartbeat limit. The lease's start time settles it: a
process that started after the lease was taken cannot be the one holding it.
"""

from __future__ import annotations

import os
import sys
import time

import pytest

from memory.store.index_generations import RebuildLeaseHolder
from tests.conftest import IndexFactory, WorkspaceFactory
from tests.test_index import FILES, generations, hold_lease, leases

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@linux_only
def test_a_lease_from_before_this_process_started_is_stale_though_the_pid_matches() -> None:
    now = time.time()
    holder = RebuildLeaseHolder(7, "old-run", os.getpid(), os.uname().nodename, now - 10**6, now)

    assert not holder.alive(now)


def test_a_lease_taken_by_this_running_process_is_alive() -> None:
    now = time.time()
    holder = RebuildLeaseHolder(7, "this-run", os.getpid(), os.uname().nodename, now, now)

    assert holder.alive(now)


@linux_only
def test_a_restarted_process_with_the_old_pid_takes_the_lease_over_at_once(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace(FILES))
    idx.sync()
    building = hold_lease(idx, pid=os.getpid(), beat=time.time())
    idx.db.execute("UPDATE memory_rebuild_lease SET started_at = started_at - 1000000")

    report = idx.sync(force=True)

    assert report.rebuilt and report.busy is None
    assert (building, "building") not in generations(idx)
    assert leases(idx) == []
