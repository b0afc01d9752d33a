"""Standing intents: matching cost with 10,000 armed intents, and the token cost of the tool.

    .venv/bin/python bench/intents.py                 # 10,000 intents, 500 messages
    .venv/bin/python bench/intents.py --intents 1000 --messages 200 --json

Matching: one agent database on disk (WAL) with N armed intents, all in the scope being matched
(the worst case: the owner's one chat holds every intent). Triggers are 1–2 words or a CJK name:
a third drawn from the words the messages use (so messages do trigger intents), the rest
names no message contains (as most of a real owner's triggers are, most of the time). Messages
are 1–4 sentences of bench/synthetic.py's English-and-Chinese text, plus a few pasted pages
(2,000 words). Timed: `IntentStore.candidates` (the prefilter and the check, read-only), and the
whole step the agent runs before a reply (`standing_intents_block`: match, fire at most 3
atomically, render). Target: p95 ≤ 5 ms per message.

Tokens: the `intent` tool as the model receives it (name, description, input schema), counted
with the Claude tokenizer and tiktoken's cl100k/o200k bundled in the litellm wheel (offline)
and with Pinch's own estimate. Target: ≤ 250 tokens.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from agent.intents import INTENT_SPEC, standing_intents_block
from agent.requests import AgentRequest
from bench.synthetic import (
    CFOODS,
    CPEOPLE,
    CPLACES,
    CPROJECTS,
    FOODS,
    PEOPLE,
    PLACES,
    PROJECTS,
    THINGS,
    WEEKDAYS,
    TextSource,
)
from memory.db import open_database
from memory.intents import MAX_CANDIDATES, IntentScope, IntentStore
from memory.sessions import SessionKey
from memory.text import ENGLISH_STOPWORDS as STOP
from memory.text import estimate_tokens

KEY = SessionKey.owner_main()
SCOPE = IntentScope.of(KEY, "owner")
T0 = 1_770_000_000.0


def messages(count: int, seed: int) -> list[str]:
    source = TextSource(seed)
    rng = random.Random(seed)
    out = [" ".join(source.sentence() for _ in range(rng.randint(1, 4))) for _ in range(count)]
    for n in range(max(1, count // 100)):  # a pasted page now and then
        out[n * 100] = " ".join(source.sentence() for _ in range(150))
    return out


def triggers(count: int, vocabulary: list[str], seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    cjk = CPEOPLE + CPLACES + CFOODS + CPROJECTS
    out = []
    for n in range(count):
        roll = rng.random()
        if roll < 0.2:
            entry = [rng.choice(vocabulary)]
        elif roll < 0.3:
            entry = [" ".join(rng.sample(vocabulary, 2))]
        elif roll < 0.35:
            entry = [rng.choice(cjk)]
        else:
            entry = [f"{rng.choice(vocabulary)}{n}x"]  # a name no message contains
        if rng.random() < 0.2:
            entry.append(f"name{n}")  # a second spelling
        out.append(entry)
    return out


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def summary(ms: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(ms), 3),
        "p95_ms": round(percentile(ms, 95), 3),
        "max_ms": round(max(ms), 3),
    }


def run_matching(n_intents: int, n_messages: int, seed: int) -> dict[str, Any]:
    texts = messages(n_messages, seed)
    # Names and things the messages mention: what a trigger is ("when Anna comes up…").
    nouns = " ".join(PEOPLE + PLACES + PROJECTS + FOODS + THINGS + WEEKDAYS)
    words = sorted({w for w in re.findall(r"[A-Za-z]{3,}", nouns) if w.lower() not in STOP})
    with tempfile.TemporaryDirectory() as tmp:
        db = open_database(Path(tmp) / "agent.sqlite", vector_backend="numpy")
        store = IntentStore.open(db)
        start = time.perf_counter()
        for n, entry in enumerate(triggers(n_intents, words, seed)):
            store.create(SCOPE, entry, f"Act on intent {n}.", now=T0)
        build_s = time.perf_counter() - start

        match_ms, block_ms, hits, capped = [], [], [], 0
        for m in texts:  # read-only: every message sees all N intents armed
            t = time.perf_counter()
            found = store.candidates(SCOPE, m, now=T0 + 1)  # all of them, unlimited
            match_ms.append((time.perf_counter() - t) * 1000)
            hits.append(len(found))
        for n, m in enumerate(texts):  # as before a reply: fires (≤ 3) are written
            request = AgentRequest(KEY, m)
            t = time.perf_counter()
            block = standing_intents_block(store, request, m, now=T0 + 1 + n)
            block_ms.append((time.perf_counter() - t) * 1000)
            capped += block is not None and block.count("\n- ") == 3
        armed_after = len(store.intents())
        db.close()
    return {
        "intents": n_intents,
        "messages": n_messages,
        "build_s": round(build_s, 2),
        "match": summary(match_ms),
        "match_and_fire": summary(block_ms),
        "messages_with_a_match": sum(1 for h in hits if h),
        "matches_per_message_max": max(hits),
        "blocks_with_3_intents": capped,
        "still_active_after": armed_after,
        "max_candidates_scanned": MAX_CANDIDATES,
    }


def tool_tokens() -> dict[str, int]:
    from bench.overhead import load_counters

    spec = {
        "name": INTENT_SPEC.name,
        "description": INTENT_SPEC.description,
        "input_schema": INTENT_SPEC.input_schema,
    }
    text = json.dumps(spec, ensure_ascii=False)
    counts = {name: count(text) for name, count in load_counters().items()}
    counts["pinch_estimate"] = estimate_tokens(text)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--intents", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = {
        "matching": run_matching(args.intents, args.messages, args.seed),
        "tool_tokens": tool_tokens(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    m = result["matching"]
    print(f"{m['intents']:,} armed intents, {m['messages']} messages (built in {m['build_s']} s)")
    for name in ("match", "match_and_fire"):
        s = m[name]
        print(f"  {name:15} p50 {s['p50_ms']} ms  p95 {s['p95_ms']} ms  max {s['max_ms']} ms")
    print(
        f"  messages with a match: {m['messages_with_a_match']}, most matches in one: "
        f"{m['matches_per_message_max']}, blocks with 3 intents: {m['blocks_with_3_intents']}"
    )
    print("intent tool schema tokens:", result["tool_tokens"])


if __name__ == "__main__":
    main()
