"""How much the centroid search's first pass (memory/search/projection.py) loses, on real vectors.

Past `projection.MIN_ROWS` centroids a search ranks the rows by their leading principal
components, scores the best `CANDIDATES` exactly and answers with the exact top k of those. This
measures, for real e5 vectors of real conversation text and real questions, how many of the
exact top k come back (recall@k), for several projection widths and candidate counts — and the
same for random unit vectors (what bench/speed.py's latency scales hold: the worst case).

The real rows: every LoCoMo dev turn alone, every two and three consecutive turns, and every
MADial dialogue's turns alike (passages, as the index embeds them); the questions: LoCoMo's.
The candidate count is given as a share of the rows and per k: what decides recall is how far
the candidates reach past the k wanted, relative to the rows (at 100k chunks the defaults keep
1,000 candidates, 1 % of the rows, for a pool of k = 100: 10 per k, the top 0.1 % wanted).

    .venv/bin/python bench/projection_recall.py                # ≈ 3-6 min on 2 cores
    .venv/bin/python bench/projection_recall.py --rows 6000    # quicker
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import numpy as np
from rich.console import Console
from rich.table import Table

from memory.embeddings.local_models import LocalE5Provider
from memory.search import projection

SHARED = Path(__file__).resolve().parents[2] / "shared" / "bench"


def texts_and_questions(limit: int) -> tuple[list[str], list[str]]:
    data = json.loads((SHARED / "locomo_dev.json").read_text(encoding="utf-8"))
    texts: list[str] = []
    questions: list[str] = []
    dialogues: list[list[str]] = []
    for sample in data:
        conversation = sample["conversation"]
        for key in sorted(k for k in conversation if k.startswith("session_") and "date" not in k):
            turns = conversation[key]
            if isinstance(turns, list):
                dialogues.append([f"{t['speaker']}: {t['text']}" for t in turns])
        questions += [str(q["question"]) for q in sample["qa"]]
    for folder in ("madial_en", "madial_zh"):
        for line in (
            (SHARED / folder / "dialogue_dev.jsonl").read_text(encoding="utf-8").splitlines()
        ):
            turns = [t.strip() for t in json.loads(line).get("dialogue", []) if t.strip()]
            if turns:
                dialogues.append(turns)
        for line in (SHARED / folder / "memory.jsonl").read_text(encoding="utf-8").splitlines():
            for item in json.loads(line).values():
                texts.append(f"{item.get('time', '')} {item.get('event', '')}".strip())
    for turns in dialogues:
        for width in (1, 2, 3):
            texts += ["\n".join(turns[i : i + width]) for i in range(0, len(turns) - width + 1)]
    unique = list(dict.fromkeys(t for t in texts if t.strip()))
    step = max(1, len(unique) // limit)
    return unique[::step][:limit], questions


def recall(
    rows: np.ndarray, queries: np.ndarray, dims: int, share: float, k: int
) -> tuple[float, float]:
    """Mean recall@k of the first pass (dims wide, candidates = share of the rows), and the
    worst question's."""
    mean, basis = projection.principal_basis(rows, np.arange(len(rows)), dims)
    fitted = projection.Projection(mean, basis, len(rows))
    fitted.set_rows(0, rows)
    count = max(int(share * len(rows)), k + 1)
    visible = np.ones(len(rows), dtype=bool)
    found: list[float] = []
    for q in queries:
        exact = set(np.argpartition(rows @ q, len(rows) - k)[len(rows) - k :].tolist())
        cand = fitted.candidates(q, len(rows), visible, count)
        sims = rows[cand] @ q
        best = cand[np.argpartition(sims, len(cand) - k)[len(cand) - k :]]
        found.append(len(exact & set(best.tolist())) / k)
    return float(np.mean(found)), float(np.min(found))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=12_000, help="real passages to embed")
    p.add_argument("--questions", type=int, default=300)
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--vectors", type=Path, help="keep the embedded vectors in this .npz and reuse them"
    )
    args = p.parse_args(argv)
    console = Console()
    texts, questions = texts_and_questions(args.rows)
    questions = questions[:: max(1, len(questions) // args.questions)][: args.questions]
    if args.vectors and args.vectors.is_file():
        saved = np.load(args.vectors)
        real, asked = saved["real"], saved["asked"]
    else:
        provider = LocalE5Provider()
        started = time.perf_counter()
        real = np.asarray(provider.embed_documents(texts), dtype=np.float32)
        asked = np.stack([provider.embed_query(q) for q in questions]).astype(np.float32)
        console.print(
            f"embedded {len(texts)} passages and {len(questions)} questions "
            f"in {time.perf_counter() - started:.0f} s"
        )
        if args.vectors:
            np.savez(args.vectors, real=real, asked=asked)
    rng = np.random.default_rng(7)
    noise = rng.standard_normal(real.shape).astype(np.float32)
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    results = []
    for name, rows in (("real e5 passages", real), ("random unit vectors", noise)):
        for dims in (64, 96, 128, 192):
            for share in (0.01, 0.02, 0.05):
                for k in (10, 100):
                    mean, worst = recall(rows, asked, dims, share, k)
                    results.append(
                        {
                            "rows": name,
                            "dims": dims,
                            "share": share,
                            "k": k,
                            "recall": mean,
                            "worst": worst,
                            "per_k": max(int(share * len(rows)), k + 1) / k,
                        }
                    )
    if args.json:
        print(json.dumps({"passages": len(texts), "questions": len(questions), "results": results}))
        return
    table = Table(title=f"first-pass recall@k: {len(texts)} rows, {len(questions)} questions")
    for col in ("rows", "dims", "candidates", "k", "per k", "mean recall", "worst question"):
        table.add_column(col)
    for r in results:
        table.add_row(
            r["rows"],
            str(r["dims"]),
            f"{r['share']:.0%}",
            str(r["k"]),
            f"{r['per_k']:.1f}",
            f"{r['recall']:.4f}",
            f"{r['worst']:.2f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
