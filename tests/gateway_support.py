"""A gateway for tests: the real Gateway, access control, durable queue and Agent (against the
scripted FakeModelServer), with FakeChannel — an in-memory implementation of our own Channel
interface — standing in for a platform."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.config import load_settings
from app.gateway.access import Access, Pairing
from app.gateway.queue import GatewayStore
from app.gateway.server import Gateway, GatewayOptions, TurnRunner
from app.gateway.turns import Runtime, run_turn
from channels.base import (
    Channel,
    ChannelHealth,
    InboundMessage,
    MessageHandler,
    OutboundMessage,
    SentMessage,
)
from channels.channel_config import GroupRule, SlackConfig, TelegramConfig
from memory.index.watch import MemoryWatcher
from memory.store.pairing_store import SqlitePairingStore
from memory.store.queue_store import SqliteQueueStore
from tests.agent_support import Kit, make_kit
from tests.fakes.model_server import FakeModelServer

OWNER_TG = "111"
OWNER_SLACK = "U111"
DB_NAME = "pinch-home/agents/main/agent.sqlite"  # where `pinch` (PINCH_HOME) finds it


class FakeChannel(Channel):
    """Records what the gateway sends, edits and types; `deliver` plays a platform event."""

    def __init__(
        self, name: str, *, max_message_chars: int = 4000, min_edit_interval_s: float = 0.0
    ) -> None:
        self.name = name
        self.max_message_chars = max_message_chars
        self.min_edit_interval_s = min_edit_interval_s
        self.handler: MessageHandler | None = None
        self.messages: dict[str, str] = {}  # message id -> current text
        self.chats: dict[str, str] = {}  # message id -> chat id
        self.sends = 0
        self.edits = 0
        self.typing_calls = 0
        self.fail_sends = 0  # the next N sends raise
        self.stopped = False
        self._ids = itertools.count(1)
        self._updates = itertools.count(1)

    async def start(self, on_message: MessageHandler) -> None:
        self.handler = on_message

    async def stop(self) -> None:
        self.stopped = True

    async def send(self, message: OutboundMessage) -> list[SentMessage]:
        if self.fail_sends:
            self.fail_sends -= 1
            raise ConnectionError("platform unreachable")
        self.sends += 1
        mid = str(next(self._ids))
        self.messages[mid] = message.text
        self.chats[mid] = message.chat_id
        return [SentMessage(self.name, message.chat_id, mid, message.thread_id)]

    async def edit(self, sent: SentMessage, text: str) -> list[SentMessage]:
        self.edits += 1
        self.messages[sent.message_id] = text
        return [sent]

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:
        self.typing_calls += 1

    async def check(self) -> ChannelHealth:
        return ChannelHealth(True, "fake platform")

    def inbound(
        self, sender_id: str, text: str, *, chat_id: str | None = None, **fields: Any
    ) -> InboundMessage:
        update = next(self._updates)
        chat = chat_id or sender_id
        values: dict[str, Any] = {
            "channel": self.name,
            "sender_id": sender_id,
            "chat_id": chat,
            "chat_type": "direct",
            "text": text,
            "message_id": str(update),
            "dedup_key": f"{chat}:{update}",
            "mentioned": True,
        }
        values.update(fields)
        return InboundMessage(**values)

    async def deliver(self, sender_id: str, text: str, **fields: Any) -> InboundMessage:
        msg = self.inbound(sender_id, text, **fields)
        assert self.handler is not None, "the gateway has not started this channel"
        await self.handler(msg)
        return msg

    def texts(self, chat_id: str | None = None) -> list[str]:
        return [t for m, t in self.messages.items() if chat_id is None or self.chats[m] == chat_id]


@dataclass
class Rig:
    gateway: Gateway
    kit: Kit
    telegram: FakeChannel
    slack: FakeChannel
    server: FakeModelServer
    turns: list[Any] = field(default_factory=list)

    async def close(self) -> None:
        await self.gateway.stop(grace_s=5)
        await self.gateway.runtime.aclose()


def make_rig(
    tmp_path: Path,
    server: FakeModelServer,
    *,
    telegram: TelegramConfig | None = None,
    slack: SlackConfig | None = None,
    options: GatewayOptions | None = None,
    turn_runner: TurnRunner = run_turn,
    kit: Kit | None = None,
    **agent_config: Any,
) -> Rig:
    """A gateway with a fake "telegram" and "slack" channel (owner 111 / U111); call
    `await rig.gateway.start()` inside the event loop."""
    kit = kit or make_kit(tmp_path, server, db_name=DB_NAME, **agent_config)
    db = kit.index.db
    tg, sl = FakeChannel("telegram"), FakeChannel("slack")
    access = Access(
        owners={"telegram": [OWNER_TG], "slack": [OWNER_SLACK]},
        channels={"telegram": telegram or TelegramConfig(), "slack": slack or SlackConfig()},
        pairing=Pairing(SqlitePairingStore(db)),
    )
    settings = load_settings(workspace=kit.workspace)
    runtime = Runtime(
        settings=settings,
        index=kit.index,
        store=kit.store,
        model=kit.agent.model,
        agent=kit.agent,
        watcher=MemoryWatcher(kit.index),
        clock=kit.agent.clock,
    )
    gateway = Gateway(
        runtime=runtime,
        channels={"telegram": tg, "slack": sl},
        store=GatewayStore(SqliteQueueStore(db)),
        access=access,
        options=options or GatewayOptions(collect_window_s=0.0),
        turn_runner=turn_runner,
    )
    return Rig(gateway, kit, tg, sl, server)


def group(
    chat_id: str, *, require_mention: bool = True, allow_from: list[str] | None = None
) -> Any:
    return {chat_id: GroupRule(require_mention=require_mention, allow_from=allow_from or [])}


Responder = Callable[..., Any]
