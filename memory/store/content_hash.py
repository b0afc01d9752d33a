"""The content hash every store keys a text by: chunks, passages, the embedding cache and the
lineage of forgotten notes all compare texts through `hash_text`."""

from __future__ import annotations

import hashlib


def hash_text(text: str) -> str:
    """SHA-256 hex digest of the text's UTF-8 bytes (lone surrogates kept, never an error)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# The embedding cache's keys and the passages' hashes (m010), and the chunks' and files' (m018),
# are stored as the digest's 32 bytes, not its 64 hex characters (feature "size", issue 22:
# ≈ 30 MB at 100k chunks, twice over with the cache's key index, and ≈ 4 MB more). Code above
# the stores sees hex text, as `hash_text` makes it; PostgreSQL keeps the hex text.
StoredHash = str | bytes


def stored_hash(text_hash: StoredHash) -> StoredHash:
    """A hash as the index stores it: a SHA-256 hex digest as its 32 bytes; anything else (a
    test's made-up key, an already stored digest) as it is."""
    if isinstance(text_hash, str) and len(text_hash) == 64:
        try:
            return bytes.fromhex(text_hash)
        except ValueError:
            return text_hash
    return text_hash


def hash_of_stored(value: StoredHash) -> str:
    """A stored hash back as the hex text `hash_text` gave."""
    return value.hex() if isinstance(value, bytes) else str(value)
