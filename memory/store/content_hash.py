"""The content hash every store keys a text by: chunks, passages, the embedding cache and the
lineage of forgotten notes all compare texts through `hash_text`."""

from __future__ import annotations

import hashlib


def hash_text(text: str) -> str:
    """SHA-256 hex digest of the text's UTF-8 bytes (lone surrogates kept, never an error)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# Hashes are stored as bytes, not hex text (feature "size", issue 22: ≈ 30 MB at 100k chunks,
# twice over with the cache's key index, and ≈ 4 MB more for the chunks' and files', m018): a
# SHA-256 digest as its 32 bytes, and since migration m016 the embedding cache's keys — and the
# passage rows' hashes, which name them — as its first 14 (`cache_key`). Code above the stores
# sees hex text, as `hash_text` makes it; PostgreSQL keeps hex text.
StoredHash = str | bytes

# Two texts share a 14-byte (112-bit) key by chance with a probability of about n² / 2^113 —
# 10^-20 at ten million cached vectors — and making a text share the key of a given one takes
# ≈ 2^112 hashes. (Two texts made to share one take ≈ 2^56, and only give the second the first
# one's vector, which whoever wrote both could have had by writing the first.) 14 rather than 16
# bytes: a 384-dimension 7-bit cache row is then 369 bytes with its cell pointer, so 11 fit a
# 4 KB page (≤ 371 each) also for a model numbered above 1 (a byte more) and for ids past
# 2,097,151 (one more); 16 bytes would give 371 only with neither.
CACHE_KEY_BYTES = 14


def stored_hash(text_hash: StoredHash) -> StoredHash:
    """A hash as the index stores it: hex text as its bytes — a SHA-256 digest's 64 digits, a
    cache key's 28 (the portable form `pinch migrate` carries it in); anything else (a test's
    made-up key, a hash already stored) as it is."""
    if isinstance(text_hash, str) and len(text_hash) in (64, 2 * CACHE_KEY_BYTES):
        try:
            return bytes.fromhex(text_hash)
        except ValueError:
            return text_hash
    return text_hash


def hash_of_stored(value: StoredHash) -> str:
    """A stored hash back as the hex text `hash_text` gave (a cache key: its 28 digits)."""
    return value.hex() if isinstance(value, bytes) else str(value)


def cache_key(text_hash: StoredHash) -> StoredHash:
    """A hash as the embedding cache keys it (hex text or stored bytes): its first
    `CACHE_KEY_BYTES` bytes; anything else (a test's made-up key) as it is."""
    stored = stored_hash(text_hash)
    return stored[:CACHE_KEY_BYTES] if isinstance(stored, bytes) else stored


def cache_key_sql(column: str) -> str:
    """SQL: `cache_key` of a column of stored hashes (a passage row's `hash`)."""
    return (
        f"CASE WHEN typeof({column}) = 'blob' THEN substr({column}, 1, {CACHE_KEY_BYTES}) "
        f"ELSE {column} END"
    )
