"""The PostgreSQL (+ pgvector) implementations of the stores in memory/store/: the same
Protocols, the same written promises, the same store tests (`[store] backend = "postgres"`).

Why a *sync* pool (psycopg_pool.ConnectionPool), not the async one: every store call is a
blocking call by contract — the SQLite stores block, and async callers already run them in
worker threads (`asyncio.to_thread`) — so the PostgreSQL stores plug into the same seam without
one caller changing. A thread borrows a connection for one transaction and gives it back, so the
pool's size bounds the connections, not the threads. An async pool would need an async twin of
every Protocol and would still be called from those worker threads.

Each agent's tables live in their own PostgreSQL schema (`pinch_<agent id>`; the search_path
of every pooled connection), so nothing crosses between agents by construction, and the agent
id is the unit a sharded PostgreSQL (Citus schema-based sharding) would distribute by.
May import memory.errors, memory.store's Protocols and values, and common only.
"""
