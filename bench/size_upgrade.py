"""Upgrade a copy of an agent database to this version's layout and measure it (issue 22).

    python bench/size_upgrade.py SOURCE.sqlite COPY.sqlite [--markdown WORKSPACE] [--quick]
        [--cache-bits 4]

Copies SOURCE (never written) to COPY, opens the copy — its pending migrations run, as they
would for a user — then compacts it (`pinch memory compact`: the cache rewritten, VACUUM) and
prints JSON (`--quick`: migrations only, no compaction; ≈ 45 s for a 10k-chunk database on
a loaded machine, ≈ 35 s of it the migrations): the seconds each step took, the file's size
before and after (× the Markdown when --markdown names the workspace it indexes), and the
pages each table takes with its indexes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.speed_cold import markdown_bytes, page_bytes
from memory.store import cache_codec
from memory.store.compact import compact
from memory.store.db import open_database


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", type=Path)
    p.add_argument("copy", type=Path)
    p.add_argument("--markdown", type=Path, help="the workspace the database indexes")
    p.add_argument("--backend", default="numpy", choices=["numpy", "sqlite-vec"])
    p.add_argument("--quick", action="store_true", help="migrations only, no compaction")
    p.add_argument(
        "--cache-bits",
        type=int,
        choices=[4, 6, 7, 8],
        help="measure with the cache's codes of this width (memory/store/cache_codec.py "
        "CACHE_BITS): the compaction rewrites them",
    )
    args = p.parse_args()
    if args.cache_bits:
        cache_codec.CACHE_BITS = args.cache_bits
    notes = markdown_bytes(args.markdown) if args.markdown else 0
    shutil.copyfile(args.source, args.copy)
    before = args.copy.stat().st_size
    before_pages = page_bytes(args.copy)
    t0 = time.perf_counter()
    db = open_database(args.copy, vector_backend=args.backend)  # migrations run here
    migrated = time.perf_counter() - t0
    try:
        t1 = time.perf_counter()
        if not args.quick:
            compact(db)
        compacted = time.perf_counter() - t1
    finally:
        db.close()
    after = sum(f.stat().st_size for f in args.copy.parent.glob(args.copy.name + "*"))
    mb = 1e6
    print(
        json.dumps(
            {
                "source": str(args.source),
                "markdown_mb": round(notes / mb, 2),
                "before_mb": round(before / mb, 1),
                "before_x": round(before / notes, 2) if notes else None,
                "migrate_s": round(migrated, 1),
                "compact_s": round(compacted, 1),
                "after_mb": round(after / mb, 1),
                "after_x": round(after / notes, 2) if notes else None,
                "before_pages_mb": {
                    k: round(v / mb, 1) for k, v in before_pages.items() if v > 1e5
                },
                "after_pages_mb": {
                    k: round(v / mb, 1) for k, v in page_bytes(args.copy).items() if v > 1e5
                },
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
