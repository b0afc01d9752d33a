"""Voice notes and audio files to text: litellm's transcription API, or a local command.

    transcriber = create_transcriber(VoiceConfig(provider="litellm", model="whisper-1"))
    result = await transcriber.transcribe(Path(".../voice-1.ogg"))   # TranscriptionError if not

`LiteLLMTranscriber` sends the file to an OpenAI-compatible `/audio/transcriptions` endpoint
(OpenAI, Groq, a local server) the way litellm does (multipart), keys from the provider's usual
environment variable. `CommandTranscriber` runs the owner's own program (whisper.cpp,
sherpa-onnx, pocketsphinx) with the file and reads the text it prints. Both stop at
`timeout_s`; every failure is a `TranscriptionError` worded as one line of advice.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agent.media.media_config import VoiceConfig
from common.redact import redact
from memory.embeddings.litellm_env import import_litellm

# "litellm.InternalServerError: InternalServerError: OpenAIException - " before the message
_PREFIXES = re.compile(r"^(?:(?:litellm\.)?\w+Error: )*(?:\w+Exception - )?")


class TranscriptionError(Exception):
    """The audio could not be transcribed; the message is one line of advice."""


@dataclass(frozen=True)
class Transcript:
    text: str
    language: str | None  # as the backend detected it, when it says
    seconds: float  # the backend's own time


class Transcriber(Protocol):
    name: str  # for messages: "litellm whisper-1", "command whisper-cli"

    async def transcribe(self, path: Path) -> Transcript: ...


NOT_CONFIGURED = (
    'voice notes are not transcribed here: set [voice] provider = "litellm" (with model and '
    'its API key) or provider = "command" (a local whisper.cpp), see the README'
)


def create_transcriber(config: VoiceConfig) -> Transcriber | None:
    """The configured backend, or None for `provider = "none"`."""
    if config.provider == "litellm":
        return LiteLLMTranscriber(
            config.model, api_base=config.api_base, timeout_s=config.timeout_s
        )
    if config.provider == "command" and config.command:
        return CommandTranscriber(config.command, timeout_s=config.timeout_s)
    return None


class LiteLLMTranscriber:
    def __init__(self, model: str, *, api_base: str | None, timeout_s: float) -> None:
        self.model = model
        self.api_base = api_base
        self.timeout_s = timeout_s
        self.name = f"litellm {model}"

    async def transcribe(self, path: Path) -> Transcript:
        litellm = await asyncio.to_thread(import_litellm)
        api_base = self.api_base or os.environ.get("OPENAI_API_BASE") or None
        api_key = self._check_key(litellm, api_base)
        started = time.perf_counter()
        upload = (upload_name(path), await asyncio.to_thread(path.read_bytes))
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await litellm.atranscription(
                    model=self.model,
                    file=upload,
                    api_base=api_base,
                    api_key=api_key,
                    timeout=self.timeout_s,
                    max_retries=0,
                )
        except TimeoutError:
            raise TranscriptionError(self._too_slow()) from None
        except Exception as exc:
            raise TranscriptionError(self._failure(exc)) from None
        text = str(_field(response, "text") or "").strip()
        language = _field(response, "language")
        return Transcript(text, str(language) if language else None, time.perf_counter() - started)

    def _check_key(self, litellm: Any, api_base: str | None) -> str | None:
        """None (the provider's variable is set), or the placeholder key a self-hosted server
        gets; TranscriptionError when a key is missing."""
        try:
            found = litellm.validate_environment(model=self.model)
        except Exception:
            return None  # an unknown provider: the call itself will say
        missing = [k for k in found.get("missing_keys") or [] if "BASE" not in k]
        if missing and not api_base:
            raise TranscriptionError(
                f"[voice] model = {self.model} needs {', '.join(missing)} in the environment"
            )
        return "no-key" if missing else None  # the OpenAI SDK sends nothing without a key

    def _too_slow(self) -> str:
        return (
            f"transcription with {self.model} took longer than [voice] timeout_s = "
            f"{self.timeout_s:g} s"
        )

    def _failure(self, exc: Exception) -> str:
        chain = [exc, exc.__cause__, exc.__context__]
        if any(type(e).__name__ in ("Timeout", "APITimeoutError", "ReadTimeout") for e in chain):
            return self._too_slow()
        status = getattr(exc, "status_code", None)
        detail = redact(str(getattr(exc, "message", "") or exc)).strip()
        detail = _PREFIXES.sub("", detail.splitlines()[0] if detail else "")[:160]
        if status in (401, 403):
            return f"the transcription service refused the key ({status}) for [voice] model"
        if isinstance(status, int) and status >= 400:
            return f"the transcription service answered {status} ({detail})"
        if type(exc).__name__ == "APIConnectionError":
            return f"the transcription service could not be reached ({detail})"
        return f"transcription failed ({type(exc).__name__}: {detail})"


class CommandTranscriber:
    """Runs `command` (split like a shell would, never through one; a leading `~` expanded) with
    the audio file in place of `{file}`, or appended; its standard output is the text."""

    def __init__(self, command: str, *, timeout_s: float) -> None:
        self.argv = [os.path.expanduser(a) for a in shlex.split(command)]
        self.timeout_s = timeout_s
        self.name = f"command {Path(self.argv[0]).name if self.argv else '?'}"

    async def transcribe(self, path: Path) -> Transcript:
        argv = [a.replace("{file}", str(path)) for a in self.argv]
        if not any("{file}" in a for a in self.argv):
            argv.append(str(path))
        started = time.perf_counter()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group: a timeout ends its children too
            )
        except FileNotFoundError:
            raise TranscriptionError(
                f"the [voice] command {argv[0]!r} was not found: install it or fix [voice] command"
            ) from None
        except PermissionError:
            raise TranscriptionError(f"the [voice] command {argv[0]!r} is not executable") from None
        except OSError as exc:  # e.g. a script without its #! line: "Exec format error"
            raise TranscriptionError(
                f"the [voice] command {argv[0]!r} could not be started ({exc.strerror or exc})"
            ) from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self.timeout_s)
        except (TimeoutError, asyncio.CancelledError) as exc:
            _kill(proc)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), 5)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise TranscriptionError(
                f"the [voice] command took longer than timeout_s = {self.timeout_s:g} s"
            ) from None
        seconds = time.perf_counter() - started
        if proc.returncode != 0:
            lines = err.decode("utf-8", "replace").strip().splitlines()
            last = redact(lines[-1])[:160] if lines else "no message"
            raise TranscriptionError(
                f"the [voice] command failed (exit status {proc.returncode}): {last}"
            )
        return Transcript(out.decode("utf-8", "replace").strip(), None, seconds)


# OGG files named the way every service takes them: OpenAI and Groq go by the extension, and
# Telegram names its voice notes ".oga", which Groq refuses.
_RENAMED = {".oga": ".ogg", ".opus": ".ogg"}


def upload_name(path: Path) -> str:
    """The file name sent with the audio (the extension is how the service tells the format)."""
    suffix = path.suffix.lower()
    return path.stem + _RENAMED.get(suffix, suffix or ".ogg")


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _field(response: Any, name: str) -> Any:
    if isinstance(response, dict):
        return response.get(name)
    value = getattr(response, name, None)
    if value is None and hasattr(response, "get"):
        with contextlib.suppress(Exception):
            value = response.get(name)
    return value
