"""A gateway-like process holding a claimed turn (tests/test_store_processes.py):

    python -m tests.store_holder sqlite PATH | postgres DSN  SESSION_KEY

It records its heartbeat, claims the session's next turn as itself, prints "claimed <turn id>
<holder>", then keeps beating every 0.1 s — a turn running for ever — until it is killed.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from memory.store.db import open_database
from memory.store.postgres.database import open_postgres
from memory.store.postgres.queue import PgQueueStore
from memory.store.queue_store import LeaseHolder, QueueStore, SqliteQueueStore


def main() -> None:
    backend, where, session = sys.argv[1], sys.argv[2], sys.argv[3]
    db: Any = (
        open_database(Path(where), vector_backend="numpy")
        if backend == "sqlite"
        else open_postgres(where, schema="pinch_main", min_size=1, max_size=2)
    )
    queue: QueueStore = SqliteQueueStore(db) if backend == "sqlite" else PgQueueStore(db)
    me = LeaseHolder(f"holder-{os.getpid()}", os.getpid(), socket.gethostname(), "telegram")
    queue.beat(me, time.time())
    turn = queue.claim_next(session, me.holder)
    print("claimed", turn.turn_id if turn else None, me.holder, flush=True)
    while True:
        time.sleep(0.1)
        queue.beat(me, time.time())


if __name__ == "__main__":
    main()
