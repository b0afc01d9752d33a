"""Command output laid out in columns reaches a chat in a code block (a chat's proportional font
would scramble columns aligned with spaces); the terminal prints the same lines as they are."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.agent_support import responder
from tests.fakes.model_server import FakeModelServer, text_reply
from tests.fakes.telegram_server import FakeTelegram
from tests.gateway_support import make_rig
from tests.telegram_support import make_channel, telegram_config, until


def test_context_reaches_telegram_in_a_code_block(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        with FakeModelServer() as server, FakeTelegram() as tg:
            server.respond_with(responder(turn=text_reply("unused")))
            rig = make_rig(tmp_path, server, telegram=telegram_config(tg))
            rig.gateway.channels["telegram"] = make_channel(tg, tmp_path)
            del rig.gateway.channels["slack"]
            await rig.gateway.start()
            tg.push(tg.private_text("/context"))
            await until(lambda: bool(tg.sent), what="the /context answer", timeout=30)
            await rig.gateway.idle()
            await rig.close()
            assert server.requests == []
            return [m.raw for m in tg.sent]

    [raw] = asyncio.run(scenario())
    assert raw.startswith("<pre>") and raw.rstrip().endswith("</pre>")
    assert "Context: ~" in raw
