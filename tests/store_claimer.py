"""A separate process claiming turns from the shared inbound queue (tests/test_store_processes.py):

    python -m tests.store_claimer sqlite PATH | postgres DSN

It claims every turn it can until the queue stays empty for a moment, finishing each, and prints
one line per turn: "<session key> <message id> <message id> …".
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from memory.store.db import open_database
from memory.store.postgres.database import open_postgres
from memory.store.postgres.queue import PgQueueStore
from memory.store.queue_store import QueueStore, SqliteQueueStore

IDLE_S = 0.5  # stop once nothing was claimable for this long


def main() -> None:
    backend, where = sys.argv[1], sys.argv[2]
    db: Any = (
        open_database(Path(where), vector_backend="numpy")
        if backend == "sqlite"
        else open_postgres(where, schema="pinch_main", min_size=1, max_size=2)
    )
    queue: QueueStore = SqliteQueueStore(db) if backend == "sqlite" else PgQueueStore(db)
    idle_since = time.monotonic()
    try:
        while time.monotonic() - idle_since < IDLE_S:
            claimed_any = False
            for key in queue.pending_sessions():
                turn = queue.claim_next(key)
                if turn is None:
                    continue
                claimed_any = True
                print(key, *(m.id for m in turn.messages), flush=True)
                queue.finish(turn.turn_id, time.time())
            if claimed_any:
                idle_since = time.monotonic()
            else:
                time.sleep(0.01)
    finally:
        db.close()


if __name__ == "__main__":
    main()
