"""What one search may see: a typed filter the agent's policy hands down to the memory index.

    SearchFilter(scopes=("", "main:cli:direct:owner"))            # the owner's direct chat
    SearchFilter(scopes=("main:telegram:group:-100",), sources=frozenset({"sessions"}))

`scopes` is the privacy boundary and is applied inside the candidate queries (keyword and vector
alike): '' is the owner's memory files (MEMORY.md, USER.md, memory/**, extra paths); any other
scope is one conversation's transcript (`SessionKey.memory_scope`). `sources` ('memory',
'extra', 'sessions') and `origins` ('owner', 'agent', 'untrusted', 'system') narrow further;
None means any. memory/ decides nothing here: who may see what is the agent's policy.

Untrusted text (fetched pages, other people's words, notes written during a turn that read
them) stays searchable but must never reach Active Memory, deep-recall summaries or Dreaming:
those search with `TRUSTED_ORIGINS` (`filter.trusted()`, or `is_trusted(hit.origin)`).
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCES = frozenset({"memory", "extra", "sessions"})
ORIGINS = frozenset({"owner", "agent", "untrusted", "system"})
# What may surface by itself or be consolidated: everything but 'untrusted'.
TRUSTED_ORIGINS = frozenset({"owner", "agent", "system"})


def is_trusted(origin: str) -> bool:
    """Whether text of `origin` may enter Active Memory, deep recall or Dreaming."""
    return origin in TRUSTED_ORIGINS


@dataclass(frozen=True)
class SearchFilter:
    scopes: tuple[str, ...]
    sources: frozenset[str] | None = None
    origins: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if not self.scopes:
            raise ValueError("A search filter needs at least one scope ('' = the memory files).")
        if self.sources is not None and not self.sources <= SOURCES:
            raise ValueError(f"Unknown sources {sorted(self.sources - SOURCES)}.")
        if self.origins is not None and not self.origins <= ORIGINS:
            raise ValueError(f"Unknown origins {sorted(self.origins - ORIGINS)}.")

    def trusted(self) -> SearchFilter:
        """This filter narrowed to trusted origins (for recall and Dreaming)."""
        origins = TRUSTED_ORIGINS if self.origins is None else self.origins & TRUSTED_ORIGINS
        return SearchFilter(self.scopes, self.sources, origins)

    @property
    def trusted_only(self) -> bool:
        """Whether untrusted text is kept out (recall): reads must leave it out too."""
        return self.origins is not None and not self.origins - TRUSTED_ORIGINS

    def admits(self, source: str, origin: str) -> bool:
        """Whether a chunk of `source` and `origin` (already inside the scopes) may be shown."""
        return (self.sources is None or source in self.sources) and (
            self.origins is None or origin in self.origins
        )
