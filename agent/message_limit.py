"""How long one message may be. A message bigger than half the usable context window (or than
MAX_MESSAGE_CHARS) is cut once, before it is stored or sent: the kept part is stored with a marker
at the cut, so it stays searchable, and the owner is told. Sent whole, such a message would only
be refused by the model (or crowd out the whole conversation), again on every turn."""

from __future__ import annotations

from agent.agent_config import AgentConfig
from memory.text import estimate_tokens

MESSAGE_SHARE = 0.5  # of the window left once the reserve and the compaction margin are set aside
MAX_MESSAGE_CHARS = 400_000  # whatever the window: the transcript and the index stay reasonable
_LINE_BREAK_LOOKBACK = 2_000  # cut at a line break this close to the limit, if there is one


def message_token_limit(config: AgentConfig) -> int:
    """The most tokens one message may take."""
    usable = config.context_window - config.reserve_floor - config.soft_threshold
    return max(500, int(usable * MESSAGE_SHARE))


def fit_message(text: str, config: AgentConfig) -> tuple[str, str | None]:
    """`text`, cut to the limit with a marker when it is longer; and the notice for the owner
    (None when nothing was cut)."""
    limit = message_token_limit(config)
    tokens = estimate_tokens(text)
    if tokens <= limit and len(text) <= MAX_MESSAGE_CHARS:
        return text, None
    keep = min(len(text), MAX_MESSAGE_CHARS, limit * 4)
    while keep > 0 and (estimate := estimate_tokens(text[:keep])) > limit:
        keep = keep * limit // estimate  # CJK text costs more per character
    line_break = text.rfind("\n", max(0, keep - _LINE_BREAK_LOOKBACK), keep)
    if line_break > 0:
        keep = line_break
    marker = (
        f"\n\n[Pinch cut this message here: it was {len(text):,} characters "
        f"(~{tokens:,} tokens), more than one message may take of the context window. "
        "The rest was not kept.]"
    )
    notice = (
        f"(Your message was too long: {len(text):,} characters, about {tokens:,} tokens, and "
        f"one message may use at most {limit:,} tokens of the model's context window. I kept "
        f"the first {keep:,} characters and answered those. For a long document, save it as a "
        "file in the workspace and ask me about it.)"
    )
    return text[:keep] + marker, notice
