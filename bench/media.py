"""Media in: what voice notes, photos and documents cost Pinch.

    .venv/bin/python bench/media.py --quick     # under a minute
    .venv/bin/python bench/media.py             # more repetitions
    .venv/bin/python bench/media.py --json

Offline: the real `Agent` with the anthropic SDK against the scripted model server, litellm
against the fake OpenAI-compatible transcription server, both on 127.0.0.1.

1. **Voice**: a voice note (espeak-ng speech → OGG/Opus, as Telegram sends it) handed to
   `Agent.run`, until the model server receives the request carrying its transcript. The
   backend's own time (the transcriber's call, measured around it) is set beside the total:
   Pinch's added time is the difference (duration probe, file handling, storing the turn,
   building the context, the model request); a second row per backend starts earlier, at the
   gateway's `on_message` (access, the durable queue, a session worker). Backends: litellm
   against the fake server (litellm imported beforehand, as the gateway does at start) and the
   command backend with a script that prints at once.
   Target: Pinch adds ≤ 200 ms.
2. **Images**: downscaling a 12-megapixel photo (4000×3000 JPEG with noise, ~real camera size)
   to what is sent (long edge 1,568 px): time and bytes; tokens per image as /context counts
   them (width × height / 750). Target ≤ 300 ms.
3. **Documents**: text extraction of a 100-page PDF (≈1,800 characters a page): the whole of it,
   and what a turn reads by default ([media] document_chars = 20,000); time and peak Python
   memory (tracemalloc).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from PIL import Image

from agent.agent_config import AgentConfig
from agent.media.documents import read_document
from agent.media.images import prepare_image
from agent.media.media_config import MediaConfig, VoiceConfig
from agent.media.transcribe import Transcriber, Transcript
from agent.model.factory import AnthropicClient
from agent.model.litellm_client import load_litellm
from agent.requests import AgentRequest
from agent.types import image_tokens
from app.wiring import build_agent
from common.attachment import Attachment
from memory.files.inbox import Inbox
from memory.index.index import MemoryIndex
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.store.sessions import SessionKey, SqliteSessionStore
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply
from tests.fakes.transcription_server import FakeTranscriptionServer, Transcription
from tests.media_support import text_pdf

TEMPLATE = Path(__file__).resolve().parents[1] / "workspace_template"
SPOKEN = "please remind me to buy oat milk on the way home and call the dentist tomorrow"


class Timed:
    """A transcriber that records how long each call took."""

    def __init__(self, inner: Transcriber) -> None:
        self.inner = inner
        self.name = inner.name
        self.seconds: list[float] = []

    async def transcribe(self, path: Path) -> Transcript:
        started = time.perf_counter()
        try:
            return await self.inner.transcribe(path)
        finally:
            self.seconds.append(time.perf_counter() - started)


@dataclass
class VoiceRow:
    backend: str
    total_ms: float  # median, Agent.run → the model request
    backend_ms: float  # median, the transcriber's call
    added_ms: float  # median of total − backend, per run


def speech(folder: Path) -> bytes:
    espeak, ffmpeg = shutil.which("espeak-ng"), shutil.which("ffmpeg")
    if not espeak or not ffmpeg:
        return b"OggS" + bytes(5000)  # no speech tools: the backends here never listen anyway
    wav, ogg = folder / "v.wav", folder / "v.ogg"
    subprocess.run([espeak, "-w", str(wav), SPOKEN], check=True, capture_output=True)
    subprocess.run(
        [ffmpeg, "-loglevel", "error", "-y", "-i", str(wav), "-c:a", "libopus", str(ogg)],
        check=True,
    )
    return ogg.read_bytes()


async def voice_rows(root: Path, runs: int) -> list[VoiceRow]:
    audio = speech(root)
    script = root / "instant-stt"
    script.write_text(f"#!/bin/sh\necho '{SPOKEN}'\n")
    script.chmod(0o755)
    await load_litellm()  # the gateway preloads it when [voice] uses litellm
    rows = []
    with FakeModelServer() as server, FakeTranscriptionServer() as stt:
        arrived: list[float] = []

        def respond(request: RecordedRequest) -> Reply:
            arrived.append(time.perf_counter())
            return text_reply("Noted.")

        server.respond_with(respond)
        configs = {
            "litellm whisper-1 (fake server)": VoiceConfig(
                provider="litellm", model="whisper-1", api_base=stt.url
            ),
            "command (instant script)": VoiceConfig(provider="command", command=str(script)),
        }
        for name, voice in configs.items():
            folder = root / name.split()[0]
            agent, workspace = _agent(folder, server, voice)
            assert agent.media is not None and agent.media.transcriber is not None
            timed = Timed(agent.media.transcriber)
            agent.media.transcriber = timed
            totals, added = [], []
            for i in range(runs + 1):  # the first run warms up (SDK clients, SQLite)
                stt.script(Transcription(SPOKEN))
                rel = Inbox(workspace).save(f"voice-{i}.ogg", audio, datetime.now(UTC))
                note = Attachment("voice", rel, None, "audio/ogg", len(audio), duration_s=5.0)
                key = SessionKey("main", "telegram", "direct", f"bench-{i}")
                started = time.perf_counter()
                async for _ in agent.run(AgentRequest(key, "", attachments=(note,))):
                    pass
                if i == 0:
                    continue
                total = arrived[-1] - started
                totals.append(total)
                added.append(total - timed.seconds[-1])
            rows.append(
                VoiceRow(
                    name,
                    statistics.median(totals) * 1000,
                    statistics.median(timed.seconds[1:]) * 1000,
                    statistics.median(added) * 1000,
                )
            )
            rows.append(
                await _through_gateway(
                    f"{name}, via the gateway", agent, server, timed, stt, audio, arrived, runs
                )
            )
            agent.index.close()
    return rows


async def _through_gateway(
    name: str,
    agent: Any,
    server: FakeModelServer,
    timed: Timed,
    stt: FakeTranscriptionServer,
    audio: bytes,
    arrived: list[float],
    runs: int,
) -> VoiceRow:
    """The same, from the gateway's `on_message` (access, the durable queue, a worker) on."""
    from tests.agent_support import Kit
    from tests.gateway_support import make_rig

    kit = Kit(agent, server, agent.index, agent.store, agent.workspace)
    rig = make_rig(agent.workspace.parent, server, kit=kit)
    await rig.gateway.start()
    totals, added = [], []
    try:
        for i in range(runs):
            stt.script(Transcription(SPOKEN))
            rel = Inbox(agent.workspace).save(f"gw-{i}.ogg", audio, datetime.now(UTC))
            note = Attachment("voice", rel, None, "audio/ogg", len(audio), duration_s=5.0)
            before = len(arrived)
            started = time.perf_counter()
            await rig.telegram.deliver("111", "", attachments=(note,), chat_id=f"gw{i}")
            while len(arrived) == before:
                await asyncio.sleep(0.001)
            total = arrived[-1] - started
            totals.append(total)
            added.append(total - timed.seconds[-1])
            await rig.gateway.idle()
    finally:
        await rig.gateway.stop(grace_s=5)
    return VoiceRow(
        name,
        statistics.median(totals) * 1000,
        statistics.median(timed.seconds[-runs:]) * 1000,
        statistics.median(added) * 1000,
    )


def _agent(folder: Path, server: FakeModelServer, voice: VoiceConfig) -> tuple[Any, Path]:
    workspace = folder / "workspace"
    shutil.copytree(TEMPLATE, workspace)
    index = MemoryIndex.open(
        workspace, folder / "agent.sqlite", MemoryConfig(embedding=EmbeddingConfig(provider="none"))
    )
    model = AnthropicClient("claude-bench", api_key="k", base_url=server.url, max_retries=0)
    agent = build_agent(
        model=model,
        store=SqliteSessionStore(index.db),
        index=index,
        workspace=workspace,
        config=AgentConfig(model="claude-bench"),
        media=(voice, MediaConfig()),
    )
    return agent, workspace


def camera_photo() -> bytes:
    """4000×3000 with sensor-like noise over a gradient: a JPEG about as big as a phone's."""
    noise = Image.effect_noise((4000, 3000), 40).convert("RGB")
    gradient = Image.linear_gradient("L").resize((4000, 3000)).convert("RGB")
    photo = Image.blend(noise, gradient, 0.5)
    out = io.BytesIO()
    photo.save(out, "JPEG", quality=92)
    return out.getvalue()


def image_figures(runs: int) -> dict[str, Any]:
    data = camera_photo()
    prepare_image(data, max_pixels=100_000_000)  # warm-up (codec tables)
    times, cpu = [], []
    for _ in range(runs):
        started, cpu_started = time.perf_counter(), time.process_time()
        image = prepare_image(data, max_pixels=100_000_000)
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    return {
        "in_bytes": len(data),
        "in_size": "4000×3000",
        "out_bytes": len(image.data),
        "out_size": f"{image.width}×{image.height}",
        "ms_median": statistics.median(times) * 1000,
        "ms_max": max(times) * 1000,
        "cpu_ms_median": statistics.median(cpu) * 1000,
        "tokens": image_tokens(image.width, image.height),
        "tokens_1000x750": image_tokens(1000, 750),
    }


def document_figures(root: Path) -> dict[str, Any]:
    line = "The hotel booking is confirmed for two nights, breakfast included, late check-in. "
    pages = [f"Page {p}\n" + "\n".join(line for _ in range(22)) for p in range(1, 101)]
    path = root / "hundred.pdf"
    path.write_bytes(text_pdf(pages))
    figures: dict[str, Any] = {"file_bytes": path.stat().st_size}
    read_document(path, "warm.pdf", max_chars=1_000)  # imports pypdf
    for label, chars in (("all 100 pages", 10_000_000), ("a turn (20,000 chars)", 20_000)):
        started, cpu_started = time.perf_counter(), time.process_time()
        doc = read_document(path, "hundred.pdf", max_chars=chars)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        tracemalloc.start()  # a second run for memory: tracing slows it down
        read_document(path, "hundred.pdf", max_chars=chars)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        figures[label] = {
            "pages": doc.last,
            "chars": len(doc.text),
            "ms": seconds * 1000,
            "cpu_ms": cpu * 1000,
            "peak_mb": peak / 1024 / 1024,
        }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few repetitions (under a minute)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args()
    runs = 4 if args.quick else 20
    with tempfile.TemporaryDirectory(prefix="pinch-media-bench-") as tmp:
        root = Path(tmp)
        os.environ["PINCH_HOME"] = str(root / "home")  # no config file of the machine's owner
        voice = asyncio.run(voice_rows(root, runs))
        images = image_figures(runs)
        documents = document_figures(root)
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    if args.json:
        print(
            json.dumps(
                {"voice": [vars(r) for r in voice], "images": images, "documents": documents}
            )
        )
        return
    print(f"load average at the end: {load} (2 cores, shared)")
    print(f"Voice ({runs} runs each, medians): arrival (Agent.run / the gateway) → model request")
    for r in voice:
        print(
            f"  {r.backend:<50} total {r.total_ms:7.1f} ms   backend {r.backend_ms:7.1f} ms   "
            f"Pinch added {r.added_ms:6.1f} ms"
        )
    print(
        f"Image: {images['in_size']} JPEG, {images['in_bytes'] / 1e6:.1f} MB → "
        f"{images['out_size']}, {images['out_bytes'] / 1e3:.0f} kB in "
        f"{images['ms_median']:.0f} ms (median, max {images['ms_max']:.0f}; CPU "
        f"{images['cpu_ms_median']:.0f} ms); "
        f"{images['tokens']:,} tokens (1000×750: {images['tokens_1000x750']:,})"
    )
    print(f"Document: 100-page PDF, {documents['file_bytes'] / 1e3:.0f} kB")
    for label in ("all 100 pages", "a turn (20,000 chars)"):
        d = documents[label]
        print(
            f"  {label:<22} {d['pages']:>3} pages, {d['chars']:,} chars in {d['ms']:.0f} ms "
            f"(CPU {d['cpu_ms']:.0f} ms), peak {d['peak_mb']:.1f} MB"
        )


if __name__ == "__main__":
    main()
