"""The provider-neutral conversation a model client sends and receives: plain frozen values.

A `Message` holds content blocks: `TextBlock`, `ImageBlock` (a picture the user sent, already
downscaled), `ToolCall` (the assistant asking for a tool) and `ToolResult` (the user side
answering it). A `ModelRequest` is what one model call needs; a
`ModelResponse` is what it produced, with token `Usage`. Nothing here knows any provider's format.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class TextBlock:
    text: str


@dataclass(frozen=True)
class ImageBlock:
    """An image in a user message: `data` is the encoded file (JPEG, PNG, WebP or GIF, already
    downscaled for the model), `path` the workspace file it was read from (what is stored)."""

    media_type: str
    data: bytes = field(repr=False)
    width: int
    height: int
    path: str = ""

    @property
    def tokens(self) -> int:
        """What the image costs, by Anthropic's rule: width × height / 750."""
        return image_tokens(self.width, self.height)


def image_tokens(width: int, height: int) -> int:
    """Tokens of an image of `width` × `height` pixels sent to a model (Anthropic's formula)."""
    return max(1, round(width * height / 750))


@dataclass(frozen=True)
class ToolCall:
    """The model asking to run tool `name` with `input`; `id` pairs it with its `ToolResult`."""

    id: str
    name: str
    input: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolResult:
    tool_use_id: str
    content: str
    is_error: bool = False
    # An image the tool attached (read_file on a picture): its stored reference (workspace path,
    # media type, size); the history sends it after the result, in this turn only.
    image: Mapping[str, Any] | None = None


ContentBlock = TextBlock | ImageBlock | ToolCall | ToolResult


@dataclass(frozen=True)
class Message:
    role: Role
    content: tuple[ContentBlock, ...]

    @classmethod
    def user(cls, text: str) -> Message:
        return cls("user", (TextBlock(text),))

    @classmethod
    def assistant(cls, text: str) -> Message:
        return cls("assistant", (TextBlock(text),))

    @classmethod
    def tool_results(cls, results: Sequence[ToolResult]) -> Message:
        return cls("user", tuple(results))

    @property
    def text(self) -> str:
        """The text blocks joined; tool calls and results left out."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolCall))

    @property
    def images(self) -> tuple[ImageBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ImageBlock))


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call; `input_schema` is a JSON Schema object."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True)
class ModelRequest:
    """One model call.

    `system` is the system prompt, as one string or as blocks (e.g. instructions, then bootstrap
    files). With `cache_prefix`, the stable prefix — tools, system, and the history before the
    newest user turn — is marked for prompt caching where the provider supports it. Keep
    per-turn material (recalled memories, the time) in the newest user message, not in `system`,
    or the prefix changes every turn and nothing is cached.
    """

    messages: tuple[Message, ...]
    system: str | tuple[str, ...] = ""
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 4096
    cache_prefix: bool = True


StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "other"]


@dataclass(frozen=True)
class Usage:
    """Token counts of one call. `input_tokens` excludes the cached part, as Anthropic reports it:
    the whole prompt is `input_tokens + cache_read_tokens + cache_write_tokens`."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )


@dataclass(frozen=True)
class ModelResponse:
    """What one call produced. `model` names the configured model that answered (with a
    `FallbackClient`, not necessarily the first). `stop_reason` uses Anthropic's vocabulary for
    every provider (OpenAI's "stop" is "end_turn", "tool_calls" is "tool_use", "length" is
    "max_tokens").

    `cut_off` is set when the answer stopped early after its first words had already streamed
    to the owner (the connection ended, the deadline passed): it says why, `text` is what
    arrived, and `tool_calls` is empty (a half-received call is never run)."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    stop_reason: StopReason
    usage: Usage
    model: str
    cut_off: str | None = None

    def to_message(self) -> Message:
        """The assistant message to append to the history."""
        blocks: list[ContentBlock] = [TextBlock(self.text)] if self.text else []
        blocks.extend(self.tool_calls)
        return Message("assistant", tuple(blocks))
