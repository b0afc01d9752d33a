"""`[voice]` and `[media]`: how received files are understood. A leaf module (pydantic only),
so app/config.py can hold it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class VoiceConfig(BaseModel):
    """`[voice]` (env PINCH_VOICE__PROVIDER, PINCH_VOICE__MODEL, PINCH_VOICE__COMMAND, …): how
    voice notes and audio files become text.

    - `provider = "litellm"`: litellm's transcription API with `model` (`whisper-1`,
      `gpt-4o-mini-transcribe`, `groq/whisper-large-v3`, …); the key comes from the provider's
      usual environment variable (OPENAI_API_KEY, GROQ_API_KEY, …); `api_base` (or
      OPENAI_API_BASE) points it at an OpenAI-compatible server.
    - `provider = "command"`: `command` is run with the audio file (in place of `{file}`, or
      appended) and prints the text: a local whisper.cpp, sherpa-onnx, pocketsphinx, ….
    - `provider = "none"`: voice notes are saved, not transcribed; the owner is told what to set.
    """

    model_config = ConfigDict(extra="forbid")

    provider: Literal["litellm", "command", "none"] = "none"
    model: str = "whisper-1"
    command: str | None = None
    api_base: str | None = None
    max_duration_s: int = Field(default=600, ge=1, le=4 * 3600)  # longer notes: not transcribed
    max_size_mb: int = Field(default=25, ge=1, le=500)  # OpenAI's own limit is 25 MB
    timeout_s: float = Field(default=120.0, gt=0, le=3600)

    @model_validator(mode="after")
    def _command_needed(self) -> VoiceConfig:
        if self.provider == "command" and not (self.command or "").strip():
            raise ValueError(
                'provider = "command" needs command, e.g. command = "whisper-cli -m '
                'ggml-base.bin -nt -f {file}"'
            )
        return self


class MediaConfig(BaseModel):
    """`[media]` (env PINCH_MEDIA__…): images and documents in a turn."""

    model_config = ConfigDict(extra="forbid")

    # Whether the model reads images: "auto" asks the model client (Claude: yes; others as
    # litellm's model list says), "on"/"off" decide it.
    vision: Literal["auto", "on", "off"] = "auto"
    max_images: int = Field(default=5, ge=1, le=20)  # per turn; an album's rest is named
    max_image_mb: int = Field(default=20, ge=1, le=200)  # bigger files are not decoded
    # A decompression-bomb guard (Pillow refuses over ~178 megapixels whatever this says).
    max_image_megapixels: int = Field(default=100, ge=1, le=170)
    document_chars: int = Field(default=20_000, ge=1_000, le=400_000)  # of a document per turn
    max_document_mb: int = Field(default=50, ge=1, le=500)
