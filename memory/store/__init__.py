"""Storage: the agent SQLite database (db.py, migrations.py, schema sets) and one repository
per store — a small Protocol stating its promises plus its SQLite implementation, which holds
all of Pinch's SQL (sessions and transcripts, the index and its generations, vectors, the
inbound queue and deliveries, jobs and runs, intents, pairing, dream runs and recall signals,
lineage and tombstones). `postgres/` holds the PostgreSQL implementations of the same
Protocols and `backends.py` the table of which exists where. The bottom of memory: may import
memory.errors and common only."""
