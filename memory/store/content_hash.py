"""The content hash every store keys a text by: chunks, passages, the embedding cache and the
lineage of forgotten notes all compare texts through `hash_text`."""

from __future__ import annotations

import hashlib


def hash_text(text: str) -> str:
    """SHA-256 hex digest of the text's UTF-8 bytes (lone surrogates kept, never an error)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
