"""A packed chunk's passages as stored (`memory_passages.spans`, memory/store/passage_pack.py):
(start line, end line, embedding cache id) triples, in the passages' order. Two forms, told
apart by length, both read by `spans_of` as the same (n, 3) uint32 array:

- plain (m014): the triples as little-endian uint32, 12 bytes a passage (a multiple of 12);
- compact (m017, what is written since): a form byte, the first passage's start line (LEB128),
  the chunk's smallest cache id (uint32) when the ids are stored as offsets from it, then each
  passage's gap after the previous one's end (the first start, for the first) and its length
  in lines — 4 bits each when every such value of the chunk is under 16, else 1, 2 or 4 bytes
  each — then the cache ids (or offsets) in the fewest bytes the chunk's largest needs, 1 to 4.
  A zero byte is added when its length would be a multiple of 12, so it is never one.

At 100k chunks of the synthetic workspace: 3.9 MB of blobs instead of 11.3 (4-bit lines and
3-byte ids almost everywhere). Passages whose lines overlap or go backwards, and a chunk the
compact form would not make shorter, keep the plain form. No SQL here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

SPAN = np.dtype("<u4")  # start line, end line, cache id
PLAIN_WIDTH = 3 * SPAN.itemsize
_FORM = 0b001_00000  # the compact form's mark (high bits): any other is not one this reads
_OFFSETS = 0b1_0000  # the cache ids are offsets from the chunk's smallest
_LINE_TYPES = (np.dtype("u1"), np.dtype("u1"), np.dtype("<u2"), np.dtype("<u4"))  # by line code
_LINE_BYTES = (1, 2, 4, 8)  # a passage's gap and length, by line code (4 bits each for code 0)
_ID_TYPES: dict[int, np.dtype[Any]] = {1: np.dtype("u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4")}
_NONE = np.zeros((0, 3), dtype=SPAN)


def spans_blob(spans: Sequence[tuple[int, int, int]]) -> bytes:
    """(start line, end line, cache id) triples as stored: the compact form when it applies
    and is shorter, else the plain one. Values must fit uint32 (passage_pack `packable`)."""
    plain = np.asarray(spans, dtype=SPAN).reshape(-1, 3)
    compact = _compact(plain.astype(np.int64))
    return compact if compact is not None and len(compact) < plain.nbytes else plain.tobytes()


def spans_of(blob: bytes) -> np.ndarray:
    """A stored blob, of either form, as an (n, 3) uint32 array of start line, end line, cache
    id."""
    return spans_of_many([blob])[0]


def spans_of_many(blobs: Sequence[bytes]) -> list[np.ndarray]:
    """`spans_of` of each blob, the compact ones of a layout decoded together: a search reads
    ≈ 100 chunks' at a time, in a few numpy calls for all (≈ 0.12 ms for 100 chunks, against
    0.05 for the plain form and 0.7 for a dozen numpy calls a chunk)."""
    out: list[np.ndarray] = [_NONE] * len(blobs)
    layouts: dict[int, list[tuple[int, int, int, int, int]]] = {}
    for i, blob in enumerate(blobs):
        if len(blob) % PLAIN_WIDTH == 0:
            out[i] = np.frombuffer(blob, dtype=SPAN).reshape(-1, 3)
        else:
            form, first, base, at, n = _header(blob)
            layouts.setdefault(form & 0b1111, []).append((i, first, base, at, n))
    for layout, members in layouts.items():
        decoded = _decode_layout(blobs, layout, members)
        for (i, *_), spans in zip(members, decoded, strict=True):
            out[i] = spans
    return out


def _decode_layout(
    blobs: Sequence[bytes], layout: int, members: list[tuple[int, int, int, int, int]]
) -> list[np.ndarray]:
    """The compact blobs `members` name ((index, first start, id base, offset of the lines,
    passages) each), all of one layout (line code and id width), as (n, 3) arrays."""
    code, width = layout & 3, (layout >> 2) + 1
    per = _LINE_BYTES[code]
    lines = b"".join(blobs[i][at : at + n * per] for i, _, _, at, n in members)
    ids = b"".join(blobs[i][at + n * per : at + n * (per + width)] for i, _, _, at, n in members)
    counts = np.array([m[4] for m in members])
    if code == 0:
        both = np.frombuffer(lines, np.uint8)
        gaps, lengths = (both & 15).astype(np.int64), (both >> 4).astype(np.int64)
    else:
        pairs = np.frombuffer(lines, _LINE_TYPES[code]).reshape(-1, 2).astype(np.int64)
        gaps, lengths = pairs[:, 0], pairs[:, 1]
    steps = gaps + lengths
    ends = np.cumsum(steps)
    # (one running sum for all: each chunk's restarted at its first start line)
    heads = np.cumsum(counts) - counts
    firsts = np.array([m[1] for m in members], dtype=np.int64)
    ends += np.repeat(firsts - ends[heads] + steps[heads], counts)
    spans = np.empty((len(ends), 3), dtype=SPAN)
    spans[:, 1] = ends
    spans[:, 0] = ends - lengths
    if width == 3:
        wide = np.zeros((len(ends), 4), dtype=np.uint8)
        wide[:, :3] = np.frombuffer(ids, np.uint8).reshape(-1, 3)
        spans[:, 2] = wide.view(SPAN).ravel()
    else:
        spans[:, 2] = np.frombuffer(ids, _ID_TYPES[width])
    if any(m[2] for m in members):
        spans[:, 2] += np.repeat(np.array([m[2] for m in members], dtype=SPAN), counts)
    ends_at = np.cumsum(counts).tolist()  # (slices: np.split costs ≈ 2 µs a chunk more)
    return [spans[a:b] for a, b in zip([0, *ends_at], ends_at, strict=False)]


def span_count(blob: bytes) -> int:
    """The passages a stored blob holds, of either form, without reading them."""
    if len(blob) % PLAIN_WIDTH == 0:
        return len(blob) // PLAIN_WIDTH
    return _header(blob)[4]


def _compact(spans: np.ndarray) -> bytes | None:
    """The compact form of int64 triples, or None where it does not apply."""
    n = len(spans)
    if n == 0:
        return None
    start, end, ids = spans[:, 0], spans[:, 1], spans[:, 2]
    steps = np.empty(2 * n, dtype=np.int64)
    steps[0::2] = start - np.concatenate(([start[0]], end[:-1]))
    steps[1::2] = end - start
    if steps.min() < 0:
        return None  # overlapping or backwards: the plain form says it as it is
    top = int(steps.max())
    code = 0 if top < 16 else 1 if top < 1 << 8 else 2 if top < 1 << 16 else 3
    low = int(ids.min())
    absolute, offset = _bytes_for(int(ids.max())), _bytes_for(int(ids.max()) - low)
    based = 4 + n * offset < n * absolute
    width = offset if based else absolute
    head = bytes([_FORM | (_OFFSETS if based else 0) | (width - 1) << 2 | code])
    head += _leb128(int(start[0])) + (low.to_bytes(4, "little") if based else b"")
    if code == 0:
        lines = (steps[0::2] | steps[1::2] << 4).astype(np.uint8).tobytes()
    else:
        lines = steps.astype(_LINE_TYPES[code]).tobytes()
    values = (ids - low if based else ids).astype(SPAN)
    blob = head + lines + values.view(np.uint8).reshape(n, 4)[:, :width].tobytes()
    return blob + b"\0" if len(blob) % PLAIN_WIDTH == 0 else blob


def _header(blob: bytes) -> tuple[int, int, int, int, int]:
    """(form byte, first start line, cache id base, offset of the lines, passages) of a
    compact blob."""
    form = blob[0]
    if form & 0b111_00000 != _FORM:
        raise ValueError(f"not a form of packed passages this version reads: {form:#04x}")
    first, shift, at = 0, 0, 1
    while True:
        byte = blob[at]
        first |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            break
        shift += 7
    base = 0
    if form & _OFFSETS:
        base = int.from_bytes(blob[at : at + 4], "little")
        at += 4
    per = _LINE_BYTES[form & 3] + (form >> 2 & 3) + 1
    return form, first, base, at, (len(blob) - at) // per


def _bytes_for(value: int) -> int:
    return 1 if value < 1 << 8 else 2 if value < 1 << 16 else 3 if value < 1 << 24 else 4


def _leb128(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
