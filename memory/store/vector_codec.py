"""How the SQLite store keeps vectors on disk: 8-bit codes with one scale per vector.

A stored vector is `b"i8"`, its scale (float32) and one signed byte per dimension: `d + 6` bytes
instead of float32's `4 d` (390 instead of 1,536 at 384 dimensions). Decoded, it is the codes
times the scale: the largest component is exact, every other within half a step (at most
max|x| / 254; for e5's unit vectors ≈ 0.0006, a cosine error of ≈ 0.0004 on average). Cosine
similarity does not depend on the scale, so sqlite-vec's `int8[d]` vec0 column (the codes alone)
ranks exactly as the decoded vectors do.

Blobs written before this format (plain little-endian float32, always a multiple of 4 bytes
long) decode as before: an index or embedding cache from an older version is read unchanged, and
`pinch memory compact` rewrites the cache in this form. Vectors whose width is not a multiple of
4 stay float32 (so the two forms can never be confused by length).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MAGIC = b"i8"
HEADER = len(MAGIC) + 4  # magic, then the float32 scale
# 4-bit codes (feature "size", issue 22), for the embedding cache's passage vectors: `b"c4"`,
# a float32 scale, then two codes a byte (low nibble first): `d / 2 + 6` bytes (198 at 384
# dimensions). What is coded is the vector minus its model's *center* (a fixed vector per model,
# kept beside the cache: e5 puts every text near one direction, |mean| ≈ 0.92, so the residual
# is small), each component of residual / scale rounded to the nearest of the 16 levels that
# are optimal for a normal distribution (Lloyd-Max), the scale being the residual's root mean
# square. Measured on 788 LoCoMo turns (e5-small): score error 0.0016 on average against
# 0.0043 for plain peak-scaled 4-bit and 0.0002 for 8-bit; passage ranking MRR within noise.
MAGIC4 = b"c4"
_HALF_LEVELS = np.array(
    [0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6181, 2.0690, 2.7326], dtype=np.float32
)
LEVELS4 = np.concatenate([-_HALF_LEVELS[::-1], _HALF_LEVELS])  # code 0..15 → level
_EDGES4 = (LEVELS4[1:] + LEVELS4[:-1]) / 2
_PAIRS4 = np.stack([LEVELS4[np.arange(256) & 0x0F], LEVELS4[np.arange(256) >> 4]], axis=1)


def encodable(dimensions: int) -> bool:
    """Whether vectors of this width are stored as 8-bit codes (else float32)."""
    return dimensions > 0 and dimensions % 4 == 0


def quantise(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 codes (n, d), float32 scales (n,)) of float vectors (n, d): codes × scale ≈ x."""
    x = np.asarray(vectors, dtype=np.float32)
    peak = np.abs(x).max(axis=1) if x.size else np.zeros(len(x), dtype=np.float32)
    scales = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    codes = np.clip(np.rint(x / scales[:, None]), -127, 127).astype(np.int8)
    return codes, scales


def encode(vector: np.ndarray) -> bytes:
    """One vector as stored (8-bit codes when its width allows, else float32)."""
    v = np.asarray(vector, dtype=np.float32).reshape(-1)
    if not encodable(len(v)):
        return v.astype("<f4").tobytes()
    codes, scales = quantise(v[None, :])
    return MAGIC + scales.astype("<f4").tobytes() + codes.tobytes()


def encode_many(vectors: np.ndarray) -> list[bytes]:
    """Several vectors (n, d) as stored, one blob each."""
    x = np.asarray(vectors, dtype=np.float32)
    if x.ndim != 2 or not encodable(x.shape[1]):
        return [encode(v) for v in x]
    codes, scales = quantise(x)
    head = [MAGIC + s for s in _split(scales.astype("<f4").tobytes(), 4)]
    return [h + c.tobytes() for h, c in zip(head, codes, strict=True)]


def _split(blob: bytes, width: int) -> list[bytes]:
    return [blob[i : i + width] for i in range(0, len(blob), width)]


def is_quantised(blob: bytes) -> bool:
    """An 8-bit vector (the centroids' and sqlite-vec's form)."""
    return len(blob) % 4 == 2 and blob[:2] == MAGIC


def is_4bit(blob: bytes) -> bool:
    return len(blob) % 4 == 2 and blob[:2] == MAGIC4


def is_compact(blob: bytes) -> bool:
    """A coded form (8-, 7-, 6- or 4-bit codes), not float32."""
    return len(blob) % 4 == 2 and blob[:2] in (MAGIC, MAGIC4, MAGIC6, MAGIC7)


def encodable4(dimensions: int) -> bool:
    """Whether vectors of this width can be stored as 4-bit codes (a whole number of bytes,
    and a length no float32 blob has)."""
    return dimensions > 0 and dimensions % 8 == 0


def encode4_many(vectors: np.ndarray, center: np.ndarray) -> list[bytes]:
    """Vectors (n, d) as 4-bit blobs around `center` (d,) (the width must be `encodable4`)."""
    x = np.asarray(vectors, dtype=np.float32) - np.asarray(center, dtype=np.float32)[None, :]
    rms = np.sqrt(np.mean(x * x, axis=1)) if x.size else np.zeros(len(x), dtype=np.float32)
    scales = rms.astype(np.float32)  # 0 for the center itself: it decodes exactly
    codes = np.searchsorted(_EDGES4, x / np.where(scales > 0, scales, 1.0)[:, None])
    codes = codes.astype(np.uint8)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    head = scales.astype("<f4").tobytes()
    return [MAGIC4 + head[4 * i : 4 * i + 4] + row.tobytes() for i, row in enumerate(packed)]


def decode4_many(blobs: Sequence[bytes], center: np.ndarray) -> np.ndarray:
    """4-bit blobs of one width (from `encode4_many` with the same `center`) as float32 (n, d)."""
    joined = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), -1)
    scales = joined[:, 2:HEADER].copy().view("<f4").reshape(-1)
    packed = joined[:, HEADER:]
    # one gather (np.take: indexing with [] is ≈ 40× slower here): a byte → its two levels
    out = np.take(_PAIRS4, packed, axis=0).reshape(len(blobs), -1)
    out *= scales[:, None]
    out += np.asarray(center, dtype=np.float32)[None, :]
    return out


def _grid(
    vectors: np.ndarray, center: np.ndarray, most: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(residuals, scales, steps) of vectors (n, d) around `center`: each residual on a uniform
    grid of `most` steps either side of 0 whose end is its largest component (the 6- and 7-bit
    forms); the center itself has scale 0 and decodes exactly."""
    x = np.asarray(vectors, dtype=np.float32) - np.asarray(center, dtype=np.float32)[None, :]
    peak = np.abs(x).max(axis=1) if x.size else np.zeros(len(x), dtype=np.float32)
    scales = (peak / most).astype(np.float32)
    steps = np.rint(x / np.where(scales > 0, scales, 1.0)[:, None])
    return x, scales, np.clip(steps, -most, most)


# 6-bit codes (issue 22), the same idea at a finer step: `b"c6"`, a float32 scale, then four
# codes in three bytes (little-endian 24 bits, first code lowest): `3 d / 4 + 6` bytes (294 at
# 384 dimensions). The residual from the model's center is rounded on a uniform grid of 63
# steps around 0 whose end is the residual's largest component (code 32 is 0): on 2,760 LoCoMo
# turns a score error of 0.0005 on average (today's 8-bit codes of the whole vector 0.00023,
# the 4-bit codes 0.0018).
MAGIC6 = b"c6"
_STEPS6 = 31


def encodable6(dimensions: int) -> bool:
    """Whether vectors of this width can be stored as 6-bit codes (whole bytes, and a length
    that no float32 blob has: 3 d / 4 + 6 is 2 more than a multiple of 4 when d % 16 == 0)."""
    return dimensions > 0 and dimensions % 16 == 0


def encode6_many(vectors: np.ndarray, center: np.ndarray) -> list[bytes]:
    """Vectors (n, d) as 6-bit blobs around `center` (d,) (the width must be `encodable6`)."""
    x, scales, steps = _grid(vectors, center, _STEPS6)
    codes = (steps + 32).astype(np.uint32).reshape(len(x), -1, 4)
    words = codes[:, :, 0] | codes[:, :, 1] << 6 | codes[:, :, 2] << 12 | codes[:, :, 3] << 18
    packed = words.astype("<u4").view(np.uint8).reshape(len(x), -1, 4)[:, :, :3]
    head = scales.astype("<f4").tobytes()
    return [
        MAGIC6 + head[4 * i : 4 * i + 4] + row.tobytes()
        for i, row in enumerate(np.ascontiguousarray(packed).reshape(len(x), -1))
    ]


def decode6_many(blobs: Sequence[bytes], center: np.ndarray) -> np.ndarray:
    """6-bit blobs of one width (from `encode6_many` with the same `center`) as float32 (n, d)."""
    joined = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), -1)
    scales = joined[:, 2:HEADER].copy().view("<f4").reshape(-1)
    b = joined[:, HEADER:].reshape(len(blobs), -1, 3)
    b0, b1, b2 = b[:, :, 0], b[:, :, 1], b[:, :, 2]
    codes = np.empty((len(blobs), b.shape[1], 4), dtype=np.uint8)  # byte arithmetic: fast
    np.bitwise_and(b0, 0x3F, out=codes[:, :, 0])
    codes[:, :, 1] = (b0 >> 6) | ((b1 & 0x0F) << 2)
    codes[:, :, 2] = (b1 >> 4) | ((b2 & 0x03) << 4)
    np.right_shift(b2, 2, out=codes[:, :, 3])
    steps = codes.view(np.int8)
    steps -= 32
    out = steps.reshape(len(blobs), -1).astype(np.float32)
    out *= scales[:, None]
    out += np.asarray(center, dtype=np.float32)[None, :]
    return out


def is_6bit(blob: bytes) -> bool:
    return len(blob) % 4 == 2 and blob[:2] == MAGIC6


# 7-bit codes (issue 22): `b"c7"`, a float32 scale, then the codes in seven planes of d / 8
# bytes: the codes are eight runs of d / 8, plane k holds run k's codes in its bytes' low seven
# bits and bit k of run 7's in their top bit (each run read back with whole-byte operations on
# contiguous bytes: 0.44 ms for a search's 950 vectors, 0.61 packed as one 56-bit word per
# eight codes). `7 d / 8 + 6` bytes (342 at 384 dimensions). The residual from the model's
# center on a uniform grid of 127 steps around 0 whose end is the residual's largest component
# (code 64 is 0): on 2,760 LoCoMo turns a score error of 0.00026 on average — what the 8-bit
# codes of the whole vector give (0.00023), in 48 bytes less a vector.
MAGIC7 = b"c7"
_STEPS7 = 63


def encodable7(dimensions: int) -> bool:
    """Whether vectors of this width can be stored as 7-bit codes (whole bytes, and a length
    that no float32 blob has: 7 d / 8 + 6 is 2 more than a multiple of 4 when d % 32 == 0)."""
    return dimensions > 0 and dimensions % 32 == 0


def encode7_many(vectors: np.ndarray, center: np.ndarray) -> list[bytes]:
    """Vectors (n, d) as 7-bit blobs around `center` (d,) (the width must be `encodable7`)."""
    x, scales, steps = _grid(vectors, center, _STEPS7)
    if not x.size:
        return []
    runs = (steps + 64).astype(np.uint8).reshape(len(x), 8, -1)
    planes = runs[:, :7, :].copy()
    for k in range(7):
        planes[:, k, :] |= ((runs[:, 7, :] >> k) & 1) << 7
    head = scales.astype("<f4").tobytes()
    return [
        MAGIC7 + head[4 * i : 4 * i + 4] + row.tobytes()
        for i, row in enumerate(planes.reshape(len(x), -1))
    ]


def decode7_many(blobs: Sequence[bytes], center: np.ndarray) -> np.ndarray:
    """7-bit blobs of one width (from `encode7_many` with the same `center`) as float32 (n, d)."""
    joined = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), -1)
    scales = joined[:, 2:HEADER].copy().view("<f4").reshape(-1)
    planes = joined[:, HEADER:].reshape(len(blobs), 7, -1)
    runs = np.empty((len(blobs), 8, planes.shape[2]), dtype=np.uint8)
    np.bitwise_and(planes, 0x7F, out=runs[:, :7, :])
    last = runs[:, 7, :]
    np.right_shift(planes[:, 0, :], 7, out=last)
    for k in range(1, 7):
        last |= (planes[:, k, :] >> 7) << k
    steps = runs.view(np.int8)
    steps -= 64
    out = steps.reshape(len(blobs), -1).astype(np.float32)
    out *= scales[:, None]
    out += np.asarray(center, dtype=np.float32)[None, :]
    return out


def is_7bit(blob: bytes) -> bool:
    return len(blob) % 4 == 2 and blob[:2] == MAGIC7


CENTERED_MAGICS = frozenset((MAGIC4, MAGIC6, MAGIC7))
_CENTERED_DECODERS = {MAGIC4: decode4_many, MAGIC6: decode6_many, MAGIC7: decode7_many}


def is_centered(blob: bytes) -> bool:
    """A vector coded around its model's center (4-, 6- or 7-bit): decoded with that center."""
    return len(blob) % 4 == 2 and blob[:2] in CENTERED_MAGICS


def decode_centered_many(blobs: Sequence[bytes], center: np.ndarray) -> np.ndarray:
    """Centered blobs of one width (4-, 6- or 7-bit, mixed or not) as float32 (n, d)."""
    if not blobs:
        return np.zeros((0, len(center)), dtype=np.float32)
    magics = {bytes(b[:2]) for b in blobs}
    if len(magics) == 1:  # the usual case: one form (a set: no Python step per blob)
        return _CENTERED_DECODERS[magics.pop()](blobs, center)
    forms: dict[bytes, list[int]] = {}
    for i, b in enumerate(blobs):
        forms.setdefault(bytes(b[:2]), []).append(i)
    out = np.empty((len(blobs), len(center)), dtype=np.float32)
    for magic, at in forms.items():
        out[at] = _CENTERED_DECODERS[magic]([blobs[i] for i in at], center)
    return out


def _needs_center() -> ValueError:
    return ValueError("a centered vector is decoded with its model's center (decode_centered_many)")


def decode(blob: bytes) -> np.ndarray:
    """A stored vector as float32 (float32 or 8-bit; a 4-bit one needs `decode4_many`)."""
    if is_centered(blob):
        raise _needs_center()
    if is_quantised(blob):
        scale = np.frombuffer(blob, dtype="<f4", count=1, offset=2)[0]
        return np.frombuffer(blob, dtype=np.int8, offset=HEADER).astype(np.float32) * scale
    return np.frombuffer(blob, dtype="<f4").astype(np.float32)


def decode_many(blobs: Sequence[bytes]) -> np.ndarray:
    """Stored vectors of one width as a float32 matrix (n, d); the forms may be mixed."""
    if not blobs:
        return np.zeros((0, 0), dtype=np.float32)
    lengths = {len(b) for b in blobs}
    if len(lengths) == 1 and lengths.pop() % 4 == 2 and all(b[:2] == MAGIC for b in blobs):
        joined = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), -1)
        scales = joined[:, 2:HEADER].copy().view("<f4").reshape(-1)
        codes = joined[:, HEADER:].view(np.int8).astype(np.float32)
        codes *= scales[:, None]
        return codes
    if not any(is_compact(b) for b in blobs):
        return np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), -1).copy()
    return np.vstack([decode(b) for b in blobs])


def int8_codes(blob: bytes) -> bytes | None:
    """The bare codes of a stored 8-bit vector (sqlite-vec's `int8[d]`), None if float32."""
    return blob[HEADER:] if is_quantised(blob) else None


def stored_size(dimensions: int) -> int:
    """Bytes a vector of this width takes as stored."""
    return dimensions + HEADER if encodable(dimensions) else 4 * dimensions


def compact_blobs(blobs: Sequence[bytes | None]) -> list[bytes | None]:
    """Stored vectors in their compact form (PostgreSQL's passages and embedding cache): each
    float32 blob whose width allows it as 8-bit codes, any other blob (coded already, an odd
    width) and None as they are. One `encode_many` per width."""
    out = [None if b is None else bytes(b) for b in blobs]
    by_width: dict[int, list[int]] = {}
    for i, b in enumerate(out):
        if b is not None and len(b) % 4 == 0 and encodable(len(b) // 4):
            by_width.setdefault(len(b) // 4, []).append(i)
    for width, at in by_width.items():
        joined = b"".join(out[i] or b"" for i in at)
        floats = np.frombuffer(joined, dtype="<f4").reshape(len(at), width)
        for i, coded in zip(at, encode_many(floats), strict=True):
            out[i] = coded
    return out


def exact_compact_blobs(blobs: Sequence[bytes | None]) -> list[bytes | None]:
    """`compact_blobs`, keeping each float32 blob whose codes would not decode to exactly its
    floats as it is: float32 decoded from 8-bit codes (what `pinch migrate` carries from
    SQLite) gets back those very codes, any other float32 vector is kept whole (lossless)."""
    out: list[bytes | None] = []
    for blob, code in zip(blobs, compact_blobs(blobs), strict=True):
        if blob is None or code is None:
            out.append(None)
        elif code != blob and decode(code).astype("<f4").tobytes() == bytes(blob):
            out.append(code)
        else:
            out.append(bytes(blob))
    return out
