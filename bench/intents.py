"""Standing intents: matching cost with 10,000 armed intents, and the token cost of the tool.

    .venv/bin/python bench/intents.py                 # 10,000 intents, 500 messages
    .venv/bin/python bench/intents.py --intents 1000 --messages 200 --json

Matching: one agent database on disk (WAL) with N armed intents, all in the scope being matched
(the worst case: the owner's one chat holds every intent). Triggers are one or two words, or a
CJK name, sometimes with a second spelling. Two scenarios: *typical*, 2 % of the triggers use
names the messages mention (the rest names no message contains, as most of an owner's triggers
are, most of the time); *stress*, 35 % do (a message triggers dozens). Messages are 1–4
sentences of bench/synthetic.py's English-and-Chinese text, and 1 in 100 a pasted page (150
sentences). Timed: `IntentStore.candidates` as the agent asks it (prefilter, check, the best 9
loaded; read-only), and the whole step before a reply (`standing_intents_block`: match, fire at
most 3 in one transaction, render). Target: p95 ≤ 5 ms per message.

Tokens: the `intent` tool as the model receives it (name, description, input schema), counted
with the Claude tokenizer and tiktoken's cl100k/o200k bundled in the litellm wheel (offline)
and with Pinch's own estimate. Target: ≤ 250 tokens.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from agent.intent_tool import INTENT_SPEC, standing_intents_block
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
from memory.lifecycle.intents import IntentScope, IntentStore
from memory.store.db import open_database
from memory.store.sessions import SessionKey
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


def triggers(count: int, vocabulary: list[str], share: float, seed: int) -> list[list[str]]:
    """`count` trigger lists; `share` of them use words the messages mention."""
    rng = random.Random(seed)
    cjk = CPEOPLE + CPLACES + CFOODS + CPROJECTS
    out = []
    for n in range(count):
        roll = rng.random() / share if share else 1.0
        if roll < 0.6:
            entry = [rng.choice(vocabulary)]
        elif roll < 0.85:
            entry = [" ".join(rng.sample(vocabulary, 2))]
        elif roll < 1.0:
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


@contextlib.contextmanager
def timed(into: list[tuple[float, float]]) -> Iterator[None]:
    """Append (wall ms, this process's CPU ms): on a shared machine the CPU time is the cost,
    the wall time adds waiting for a core (and for the disk, when writing)."""
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    into.append(((time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000))


def summary(samples: list[tuple[float, float]]) -> dict[str, float]:
    out = {}
    for n, kind in enumerate(("wall", "cpu")):
        ms = [s[n] for s in samples]
        out[f"{kind}_p50_ms"] = round(statistics.median(ms), 3)
        out[f"{kind}_p95_ms"] = round(percentile(ms, 95), 3)
        out[f"{kind}_max_ms"] = round(max(ms), 3)
    return out


def run_matching(n_intents: int, n_messages: int, share: float, seed: int) -> dict[str, Any]:
    texts = messages(n_messages, seed)
    # Names and things the messages mention: what a trigger is ("when Anna comes up…").
    nouns = " ".join(PEOPLE + PLACES + PROJECTS + FOODS + THINGS + WEEKDAYS)
    words = sorted({w for w in re.findall(r"[A-Za-z]{3,}", nouns) if w.lower() not in STOP})
    with tempfile.TemporaryDirectory() as tmp:
        db = open_database(Path(tmp) / "agent.sqlite", vector_backend="numpy")
        store = IntentStore.open(db)
        start = time.perf_counter()
        for n, entry in enumerate(triggers(n_intents, words, share, seed)):
            store.create(SCOPE, entry, f"Act on intent {n}.", now=T0)
        build_s = time.perf_counter() - start

        hits = [len(store.candidates(SCOPE, m, now=T0 + 1)) for m in texts]  # untimed
        match_ms: list[tuple[float, float]] = []
        block_ms: list[tuple[float, float]] = []
        blocks = 0
        for m in texts:  # read-only, as the agent asks (the best 9): all N intents stay armed
            with timed(match_ms):
                store.candidates(SCOPE, m, now=T0 + 1, limit=9)
        for n, m in enumerate(texts):  # the whole step before a reply: fires (≤ 3) are written
            request = AgentRequest(KEY, m)
            with timed(block_ms):
                block = standing_intents_block(store, request, m, now=T0 + 1 + n)
            blocks += block is not None
        active_after = len(store.intents())
        db.close()
    return {
        "intents": n_intents,
        "matching_share": share,
        "messages": n_messages,
        "build_s": round(build_s, 2),
        "match": summary(match_ms),
        "match_and_fire": summary(block_ms),
        "messages_with_a_match": sum(1 for h in hits if h),
        "matches_per_message_median": statistics.median(hits),
        "matches_per_message_max": max(hits),
        "replies_with_a_block": blocks,
        "still_active_after": active_after,
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


SCENARIOS = {"typical": 0.02, "stress": 0.35}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--intents", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result: dict[str, Any] = {
        name: run_matching(args.intents, args.messages, share, args.seed)
        for name, share in SCENARIOS.items()
    }
    result["tool_tokens"] = tool_tokens()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name in SCENARIOS:
        m = result[name]
        print(
            f"{name}: {m['intents']:,} armed intents ({m['matching_share']:.0%} on words the "
            f"messages use), {m['messages']} messages (built in {m['build_s']} s)"
        )
        for step in ("match", "match_and_fire"):
            for kind in ("wall", "cpu"):
                p50, p95, top = (m[step][f"{kind}_{q}_ms"] for q in ("p50", "p95", "max"))
                print(f"  {step:15} {kind:4} p50 {p50} ms  p95 {p95} ms  max {top} ms")
        print(
            f"  messages with a match: {m['messages_with_a_match']}, matches per message: "
            f"median {m['matches_per_message_median']}, max {m['matches_per_message_max']}"
        )
    print("intent tool schema tokens:", result["tool_tokens"])


if __name__ == "__main__":
    main()
