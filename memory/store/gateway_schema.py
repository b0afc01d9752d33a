"""The gateway's tables in the agent database, as its own migration set (memory/store/schema.py).

Pairing requests and approvals (memory/store/pairing_store.py), the durable inbound queue,
de-duplication records, delivery records and session leases (memory/store/queue_store.py). One
set for both because they shipped as one migration: append new migrations; never edit, rename or
reorder one that has shipped.
"""

from __future__ import annotations

from typing import Any

from memory.store.schema import MigrationSet


def g001_gateway_tables(conn: Any) -> None:
    conn.executescript(
        """
        -- A code an unknown sender got; the owner approves or rejects it by code.
        CREATE TABLE pairing_requests (
            id INTEGER PRIMARY KEY,
            channel TEXT NOT NULL,
            sender_id TEXT NOT NULL,
            sender_name TEXT,
            code TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'rejected')),
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL,
            decided_at REAL
        );
        CREATE INDEX pairing_requests_by_sender
            ON pairing_requests (channel, sender_id, created_at);
        CREATE INDEX pairing_requests_by_code ON pairing_requests (code);
        -- People the owner approved for direct messages (pairing grants DMs only).
        CREATE TABLE approved_senders (
            channel TEXT NOT NULL,
            sender_id TEXT NOT NULL,
            sender_name TEXT,
            approved_at REAL NOT NULL,
            PRIMARY KEY (channel, sender_id)
        );
        -- Every accepted inbound message, until its turn's reply is delivered.
        CREATE TABLE inbound_queue (
            id INTEGER PRIMARY KEY AUTOINCREMENT,  -- the order of arrival
            session_key TEXT NOT NULL,
            channel TEXT NOT NULL,
            sender_role TEXT NOT NULL,             -- owner | person
            message TEXT NOT NULL,                 -- JSON of the InboundMessage
            state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done')),
            turn_id INTEGER,                       -- the batch it was answered in
            received_at REAL NOT NULL,
            done_at REAL
        );
        CREATE INDEX inbound_queue_pending ON inbound_queue (state, session_key, id);
        -- Platform ids already accepted: a redelivery (Slack retry, Telegram re-fetch) is
        -- recognised for at least the de-duplication window.
        CREATE TABLE inbound_dedup (
            channel TEXT NOT NULL,
            dedup_key TEXT NOT NULL,
            seen_at REAL NOT NULL,
            PRIMARY KEY (channel, dedup_key)
        ) WITHOUT ROWID;
        -- Replies the platform accepted, recorded right after it did (one commit), so a restart
        -- edits the message it already sent instead of sending a second one.
        CREATE TABLE outbound_deliveries (
            turn_id INTEGER NOT NULL,
            part INTEGER NOT NULL,                 -- 0, 1, … when a reply was split
            channel TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            message_id TEXT NOT NULL,
            thread_id TEXT,
            final INTEGER NOT NULL DEFAULT 0,      -- 1 once the whole reply is in it
            delivered_at REAL NOT NULL,
            PRIMARY KEY (turn_id, part)
        );
        """
    )


def g002_claimants_and_session_leases(conn: Any) -> None:
    conn.executescript(
        """
        -- The process-local channel instance that alone may answer a queued message (a
        -- `pinch chat` terminal); NULL: the gateway's channels (Telegram, Slack).
        ALTER TABLE inbound_queue ADD COLUMN claimant TEXT;
        -- Which process is running a turn of a session now: one turn per session across
        -- processes (`pinch gateway` and `pinch chat` share the owner's main session). A lease
        -- whose heartbeat is old, or whose holder process is gone, is free.
        CREATE TABLE session_leases (
            session_key TEXT PRIMARY KEY,
            holder TEXT NOT NULL,                  -- the process's instance id
            pid INTEGER NOT NULL,
            host TEXT NOT NULL,
            channel TEXT NOT NULL,                 -- whose message the running turn answers
            heartbeat_at REAL NOT NULL
        ) WITHOUT ROWID;
        """
    )


def g003_queue_claims(conn: Any) -> None:
    # Feature: several gateway processes on one database (issue 19, PostgreSQL wired). Which
    # process claimed a running message, and each claiming process's heartbeat: a restart or
    # another gateway re-queues only the claims of a process that is gone.
    conn.executescript(
        """
        ALTER TABLE inbound_queue ADD COLUMN claimed_by TEXT;
        CREATE TABLE queue_claimants (
            holder TEXT PRIMARY KEY,               -- the process's instance id
            pid INTEGER NOT NULL,
            host TEXT NOT NULL,
            heartbeat_at REAL NOT NULL
        ) WITHOUT ROWID;
        """
    )


GATEWAY = MigrationSet(
    "gateway", [g001_gateway_tables, g002_claimants_and_session_leases, g003_queue_claims]
)
