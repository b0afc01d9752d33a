"""The terminal as the `cli` channel of the gateway: its messages take the same path as
Telegram's (durable queue, session lease, turn, delivery), claimed only by the chat's own process,
and one turn per session across processes.

Two `Gateway` instances over one database stand for `pinch gateway` and `pinch chat` (each has
its own lease holder id, as two processes do); the terminal's input and output are a scripted
implementation of our own ChatIO interface.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agent.requests import AgentRequest
from app.gateway.access import Access, Pairing
from app.gateway.queue import GatewayStore, LeaseHolder
from app.gateway.server import Gateway, GatewayOptions
from app.gateway.turns import Runtime, TurnResult, run_turn
from channels.base import InboundMessage
from channels.terminal import CHAT_HELP, CliChannel, TurnOutcome
from memory.store.db import Database
from memory.store.pairing_store import SqlitePairingStore
from memory.store.queue_store import SqliteQueueStore
from memory.store.sessions import SessionKey
from tests.agent_support import all_text, make_kit, responder
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply
from tests.gateway_support import DB_NAME, OWNER_TG, make_rig

OWNER_MAIN = str(SessionKey.owner_main("main"))


def queue_of(db: Database, *, claimant: str | None = None) -> GatewayStore:
    return GatewayStore(SqliteQueueStore(db, claimant=claimant))


def echo(request: RecordedRequest) -> Reply:
    return text_reply(f"re: {request.last_user_text()}")


@dataclass
class ScriptedIO:
    """The terminal, scripted: lines typed in, what the chat shows recorded."""

    lines: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)
    shown: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    outcomes: list[TurnOutcome] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def read(self) -> str | None:
        return await self.lines.get()

    @contextlib.contextmanager
    def begin(self, cancel: Callable[[], None]) -> Iterator[None]:
        yield

    def show(self, text: str) -> None:
        self.shown.append(text)
        self.changed.set()

    def status(self, text: str) -> None:
        self.statuses.append(text)
        self.changed.set()

    def started(self) -> None:
        self.statuses.append("(turn started)")
        self.changed.set()

    def end(self, outcome: TurnOutcome, streamed: str) -> bool:
        self.outcomes.append(outcome)
        self.changed.set()
        return outcome.kind == "answered"

    async def until(self, done: Callable[[], bool]) -> None:
        while not done():
            self.changed.clear()
            await self.changed.wait()


def chat_gateway(runtime: Runtime, io: ScriptedIO) -> tuple[Gateway, CliChannel]:
    """`pinch chat`'s gateway: only the cli channel, its own queue claimant."""
    channel = CliChannel(io)
    db = runtime.index.db
    gateway = Gateway(
        runtime=runtime,
        channels={"cli": channel},
        store=queue_of(db, claimant=channel.instance),
        access=Access(owners={}, channels={}, pairing=Pairing(SqlitePairingStore(db))),
        options=GatewayOptions(collect_window_s=0.0, lease_poll_s=0.01),
    )

    def cancel() -> None:
        gateway.cancel_turn(OWNER_MAIN)

    channel.on_cancel = cancel
    return gateway, channel


def cli_message(text: str, n: int = 1) -> InboundMessage:
    return InboundMessage("cli", "owner", "terminal", "direct", text, str(n), f"t:{n}")


# ---- the queue: each process claims only its own messages -------------------------------------


def test_the_gateway_never_claims_a_terminals_message(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server, db_name=DB_NAME)
        chat_store = queue_of(kit.index.db, claimant="cli-one")
        gateway_store = queue_of(kit.index.db)
        chat_store.accept(cli_message("hi"), OWNER_MAIN, "owner")

        assert gateway_store.pending_sessions() == []
        assert gateway_store.next_batch(OWNER_MAIN) is None
        assert queue_of(kit.index.db, claimant="cli-two").next_batch(OWNER_MAIN) is None
        batch = chat_store.next_batch(OWNER_MAIN)
        assert batch is not None and batch.messages[0].message.text == "hi"


def test_a_terminal_never_claims_a_telegram_message_of_the_same_session(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server, db_name=DB_NAME)
        msg = InboundMessage("telegram", OWNER_TG, OWNER_TG, "direct", "hi", "1", "111:1")
        queue_of(kit.index.db).accept(msg, OWNER_MAIN, "owner")

        assert queue_of(kit.index.db, claimant="cli-one").next_batch(OWNER_MAIN) is None


# ---- the session lease --------------------------------------------------------------------------


def holder(name: str, pid: int, channel: str = "telegram") -> LeaseHolder:
    import socket

    return LeaseHolder(name, pid, socket.gethostname(), channel)


def test_a_live_process_holding_a_session_keeps_others_out(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        store = queue_of(make_kit(tmp_path, server, db_name=DB_NAME).index.db)
        gateway = holder("gateway", pid=os.getppid())

        assert store.acquire_lease(OWNER_MAIN, gateway, stale_s=30) is None
        other = store.acquire_lease(OWNER_MAIN, holder("chat", 1, "cli"), stale_s=30)
        assert other is not None and other.channel == "telegram"
        store.release_lease(OWNER_MAIN, gateway)
        assert store.acquire_lease(OWNER_MAIN, holder("chat", 1, "cli"), stale_s=30) is None


def test_the_lease_of_a_process_that_died_is_free(tmp_path: Path) -> None:
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    with FakeModelServer() as server:
        store = queue_of(make_kit(tmp_path, server, db_name=DB_NAME).index.db)
        store.acquire_lease(OWNER_MAIN, holder("gone", int(ended.stdout)), stale_s=30)

        assert store.acquire_lease(OWNER_MAIN, holder("chat", 1, "cli"), stale_s=30) is None


def test_a_lease_whose_heartbeat_stopped_is_free(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        store = queue_of(make_kit(tmp_path, server, db_name=DB_NAME).index.db)
        hung = holder("hung", os.getppid())
        store.acquire_lease(OWNER_MAIN, hung, stale_s=30)

        assert store.acquire_lease(OWNER_MAIN, holder("chat", 1, "cli"), stale_s=0.0) is None


# ---- the terminal on the gateway path ------------------------------------------------------


def test_a_terminal_message_is_answered_through_the_durable_queue(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[TurnOutcome], dict[str, int]]:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            rig = make_rig(tmp_path, server)
            io = ScriptedIO()
            chat, channel = chat_gateway(rig.gateway.runtime, io)
            await chat.start()
            await io.lines.put("hello there")
            await io.until(lambda: bool(io.outcomes))
            await io.lines.put(None)
            assert await channel.finished() == 0
            await chat.stop(5)
            counts = chat.store.counts()
            await rig.gateway.runtime.aclose()
            return io.outcomes, counts

    outcomes, counts = asyncio.run(scenario())
    assert outcomes == [TurnOutcome("answered", "re: hello there")]
    assert counts == {"done": 1}


def test_help_in_the_terminal_lists_the_chats_own_keys(tmp_path: Path) -> None:
    async def scenario() -> list[TurnOutcome]:
        with FakeModelServer() as server:
            rig = make_rig(tmp_path, server)
            io = ScriptedIO()
            chat, channel = chat_gateway(rig.gateway.runtime, io)
            await chat.start()
            await io.lines.put("/help")
            await io.lines.put(None)
            await channel.finished()
            await chat.stop(5)
            await rig.gateway.runtime.aclose()
            return io.outcomes

    [outcome] = asyncio.run(scenario())
    assert outcome.command == "/help"
    assert CHAT_HELP not in outcome.text  # the terminal adds its keys when it shows it


def test_the_terminal_waits_for_a_telegram_reply_on_the_same_session(tmp_path: Path) -> None:
    async def scenario() -> tuple[ScriptedIO, list[RecordedRequest]]:
        started, gate = asyncio.Event(), asyncio.Event()

        async def gated(
            rt: Runtime, req: AgentRequest, on_text: Callable[[str], None]
        ) -> TurnResult:
            started.set()
            await gate.wait()
            return await run_turn(rt, req, on_text)

        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            rig = make_rig(tmp_path, server, turn_runner=gated)  # `pinch gateway`
            io = ScriptedIO()
            chat, channel = chat_gateway(rig.gateway.runtime, io)  # `pinch chat`
            await rig.gateway.start()
            await chat.start()
            await rig.telegram.deliver(OWNER_TG, "my locker code is 4711")
            await started.wait()
            await io.lines.put("what is my locker code?")
            await io.until(lambda: bool(io.statuses))
            assert server.requests == []  # the terminal's turn did not start beside Telegram's
            gate.set()
            await io.until(lambda: bool(io.outcomes))
            await io.lines.put(None)
            await channel.finished()
            await chat.stop(5)
            await rig.close()
            return io, list(server.requests)

    io, requests = asyncio.run(scenario())
    assert io.statuses == ["waiting for a reply on Telegram to finish…", "(turn started)"]
    assert [r.last_user_text() for r in requests][-1].endswith("what is my locker code?")
    assert "4711" in all_text(requests[-1])  # after Telegram's turn, in the same session
    assert io.outcomes[0].kind == "answered"


def test_ctrl_c_cancels_the_running_turn_and_it_is_not_run_again(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[TurnOutcome], dict[str, int]]:
        with FakeModelServer() as server:
            server.script(
                text_reply(" ".join(["word"] * 400), chunk_delay_s=0.02),  # 8 s unless cancelled
                text_reply("Second answer."),
            )
            rig = make_rig(tmp_path, server)
            io = ScriptedIO()
            chat, channel = chat_gateway(rig.gateway.runtime, io)
            await chat.start()
            await io.lines.put("write slowly")
            await io.until(lambda: any("word word" in s for s in io.shown))
            began = time.monotonic()
            channel.on_cancel()
            await io.until(lambda: bool(io.outcomes))
            assert time.monotonic() - began < 2
            await io.lines.put("and now?")
            await io.until(lambda: len(io.outcomes) == 2)
            await io.lines.put(None)
            await channel.finished()
            await chat.stop(5)
            counts = chat.store.counts()
            await rig.gateway.runtime.aclose()
            return io.outcomes, counts

    outcomes, counts = asyncio.run(scenario())
    assert outcomes[0].kind == "cancelled" and outcomes[0].text.startswith("word word")
    assert outcomes[1] == TurnOutcome("answered", "Second answer.")
    assert counts == {"done": 2}  # the cancelled message is answered, not queued again


def test_piped_exit_status_is_one_when_a_message_got_no_answer(tmp_path: Path) -> None:
    async def scenario() -> int:
        with FakeModelServer() as server:
            server.script(Reply(status=401, error_message="invalid x-api-key"), text_reply("ok"))
            rig = make_rig(tmp_path, server)
            io = ScriptedIO()
            chat, channel = chat_gateway(rig.gateway.runtime, io)
            await chat.start()
            for line in ("hello", "again", None):
                await io.lines.put(line)
            status = await channel.finished()
            await chat.stop(5)
            await rig.gateway.runtime.aclose()
            return status

    assert asyncio.run(scenario()) == 1


def test_a_closed_terminals_unanswered_message_is_pruned_by_the_gateway(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        db = make_kit(tmp_path, server, db_name=DB_NAME).index.db
        queue_of(db, claimant="cli-gone").accept(cli_message("hi"), OWNER_MAIN, "owner")
        with db.transaction() as conn:  # the terminal closed an hour ago without an answer
            conn.execute("UPDATE inbound_queue SET received_at = received_at - 3600")

        queue_of(db).prune(dedup_ttl_s=600)

        assert queue_of(db, claimant="cli-gone").counts() == {}


def test_ctrl_c_while_waiting_for_telegrams_reply_gives_up_the_wait(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[TurnOutcome], dict[str, int]]:
        started, gate = asyncio.Event(), asyncio.Event()

        async def gated(
            rt: Runtime, req: AgentRequest, on_text: Callable[[str], None]
        ) -> TurnResult:
            started.set()
            await gate.wait()
            return await run_turn(rt, req, on_text)

        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            rig = make_rig(tmp_path, server, turn_runner=gated)
            io = ScriptedIO()
            chat, channel = chat_gateway(rig.gateway.runtime, io)
            await rig.gateway.start()
            await chat.start()
            await rig.telegram.deliver(OWNER_TG, "hello from telegram")
            await started.wait()
            await io.lines.put("never mind")
            await io.until(lambda: bool(io.statuses))
            channel.on_cancel()
            await io.until(lambda: bool(io.outcomes))
            gate.set()
            await rig.gateway.idle()
            await io.lines.put(None)
            await channel.finished()
            await chat.stop(5)
            counts = chat.store.counts()
            await rig.close()
            return io.outcomes, counts

    outcomes, counts = asyncio.run(scenario())
    assert outcomes == [TurnOutcome("cancelled", "")]
    assert counts == {"done": 2}  # Telegram's message answered, the terminal's given up
