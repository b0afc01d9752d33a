"""Active Memory, measured: the recall-intent detector, the fast path's latency, and what deep
recall's search finds on LoCoMo.

    .venv/bin/python bench/recall.py                      # everything, keyword-only search
    .venv/bin/python bench/recall.py --embedding local    # deep-recall search with the local model
    .venv/bin/python bench/recall.py --no-locomo-search --json

1. **Recall intent** (agent/recall_intent.py), English: positives are every LoCoMo question
   (questions about what was said in earlier sessions), negatives every user utterance of the
   MADial dialogues (a child's small talk with an assistant). Chinese: positives are 50 LoCoMo
   questions (a seeded sample) translated by hand for this benchmark (`ZH_POSITIVES`), negatives
   the MADial Chinese user utterances. Precision is reported on the natural mix and on a
   balanced one (as many negatives as positives, from the rates), since the mix's ratio is
   arbitrary.
2. **Fast-path latency**: MEMORY.md with 2,000 trigger entries (seeded, English and Chinese
   terms); each LoCoMo question is matched through `ActiveMemory.fast_hits` (stat, cache, match)
   — p50/p95/max, and the same through `await memory(key, message)` in mode "triggers" (the
   worker-thread hop included); and the cold parse of the file.
3. **Deep recall's search** on LoCoMo: each question is searched the way the deep-recall
   sub-call's memory_search does (same code, the owner's memory without untrusted chunks, 6
   results) with the question as the query — no model. Reported: how often the evidence turn is
   *seen* (its whole line in a returned snippet) and *located* (inside a hit's line range) in
   the top 6, for every question and for those the detector sends to deep recall.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agent.active_memory import TRUSTED_ORIGINS, ActiveMemory  # noqa: E402
from agent.agent_config import AgentConfig  # noqa: E402
from agent.recall_intent import recall_intent  # noqa: E402
from bench import locomo  # noqa: E402
from bench.scoring import Hit, score_locomo  # noqa: E402
from bench.workspace import relative_hit_path, write_workspace  # noqa: E402
from memory.index.index import MemoryIndex  # noqa: E402
from memory.memory_config import EmbeddingConfig, MemoryConfig  # noqa: E402
from memory.search.filters import SearchFilter  # noqa: E402
from memory.store.sessions import SessionKey  # noqa: E402

DATA = ROOT.parent.parent / "shared" / "bench"
if not DATA.exists():
    DATA = Path("/work/shared/bench")
_SPEAKER = re.compile(r"^\s*<([^<>]*)>\s*[:：]\s*(.*)$", re.DOTALL)
_QUOTES = "\"'“”‘’「」『』"

# 50 LoCoMo questions (random.Random(9).sample of the dev set's questions), translated by hand.
ZH_POSITIVES = [
    "玛丽亚想通过领养救助犬教给孩子们哪些重要的价值观？",
    "内特做了什么分享给他的纯素饮食小组？",
    "玛丽亚为家里做了什么来纪念她的英国之旅？",
    "大家对即将到来的盛大开业总体感觉如何？",
    "梅兰妮的儿子在公路旅行中发生了什么事？",
    "卡罗琳的儿子是怎么应对那次事故的？",
    "蒂姆和约翰为什么觉得勒布朗很励志？",
    "内特最喜欢养乌龟的哪一点？",
    "梅兰妮打算什么时候去露营？",
    "玛丽亚和教会的朋友们一起做过哪些活动？",
    "乔安娜发现过几次新的徒步路线？",
    "除了德语，蒂姆还会什么语言？",
    "内特在2022年6月组织什么活动？",
    "梅兰妮是怎么把照顾自己放在首位的？",
    "约翰的孩子们叫什么名字？",
    "乔安娜计划什么时候去内特家看他和乌龟玩？",
    "约翰和队友们在团队旅行中打算避开哪里？",
    "截至2022年7月10日，内特赢了多少场电子游戏比赛？",
    "乔安娜做了什么分享给她的纯素饮食小组？",
    "梅兰妮会更想去国家公园还是主题公园？",
    "内特从他哥哥那里收到了什么，让他想起了童年？",
    "约翰做了什么让他的钱包吃紧？",
    "卡罗琳一家去年露营时看到了什么？",
    "内特的新书探讨了哪些具体主题？",
    "蒂姆在白板上写什么来保持动力？",
    "约翰家里那个城堡影盒的灵感是从哪里来的？",
    "蒂姆是怎么从上赛季的脚踝伤中恢复过来的？",
    "乔安娜的乌龟吃什么样的食物？",
    "除了在工作室做瑜伽，约翰还做过什么活动？",
    "卡罗琳一家露营时做了什么？",
    "卡罗琳多久带孩子们去一次海滩？",
    "乔恩在给他的舞蹈工作室找什么样的地板？",
    "卡罗琳什么时候画了一幅自画像？",
    "为什么花对梅兰妮很重要？",
    "2023年10月13日梅兰妮给卡罗琳看了哪幅画？",
    "乔安娜的哪些剧本被制作公司拒绝了？",
    "2023年11月21日蒂姆的写作项目遇到了什么挫折？",
    "蒂姆在和哪个组织合作做慈善？",
    "乔安娜那次试镜是为了什么？",
    "梅兰妮和家人徒步时会做什么？",
    "蒂姆是哪一周去英国参加哈利·波特大会的？",
    "内特觉得他做的焦糖冰淇淋怎么样？",
    "约翰最近在博客上的研究和写作重点是什么？",
    "还有哪些练习能帮助约翰提高篮球水平？",
    "约翰收到过哪些代言邀约？",
    "约翰年轻时是怎么应对怀疑和压力的？",
    "梅兰妮新买的鞋是用来做什么的？",
    "约翰一直在为网络杂志写哪类文章？",
    "乔恩去巴塞罗那是为了什么？",
    "乔恩什么时候开始去健身房的？",
]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--locomo", type=Path, default=DATA / "locomo_dev.json")
    p.add_argument("--madial-en", type=Path, default=DATA / "madial_en")
    p.add_argument("--madial-zh", type=Path, default=DATA / "madial_zh")
    p.add_argument("--embedding", default="none", help="local | use | none (default: none)")
    p.add_argument("--entries", type=int, default=2000, help="trigger entries for the latency run")
    p.add_argument("--no-locomo-search", action="store_true")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "recall")
    p.add_argument("--show-errors", type=int, default=0, help="print N misclassified messages")
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def madial_user_utterances(folder: Path) -> list[str]:
    """Every non-assistant line of the dialogue files, speaker tag and quotes stripped."""
    out: list[str] = []
    for path in sorted(folder.glob("dialogue*.json*")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            for turn in json.loads(line).get("dialogue", []):
                m = _SPEAKER.match(turn.strip())
                if m and m.group(1).strip().lower() != "assistant":
                    text = m.group(2).strip().strip(_QUOTES).strip()
                    if text:
                        out.append(text)
    return out


def intent_scores(positives: list[str], negatives: list[str], show: int) -> dict[str, float]:
    tp = sum(bool(recall_intent(q)) for q in positives)
    fp_texts = [u for u in negatives if recall_intent(u)]
    fp = len(fp_texts)
    recall = tp / len(positives)
    fp_rate = fp / len(negatives)
    if show:
        for q in [q for q in positives if not recall_intent(q)][:show]:
            print(f"  missed: {q}", file=sys.stderr)
        for u in fp_texts[:show]:
            print(f"  false alarm: {u}", file=sys.stderr)
    return {
        "positives": len(positives),
        "negatives": len(negatives),
        "recall": recall,
        "precision_natural_mix": tp / (tp + fp) if tp + fp else 0.0,
        "precision_balanced": recall / (recall + fp_rate) if recall + fp_rate else 0.0,
        "false_alarm_rate": fp_rate,
    }


def synthetic_memory(entries: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    words = [
        "garden",
        "tomato",
        "basil",
        "dentist",
        "lisbon",
        "train",
        "budget",
        "invoice",
        "anna",
        "peanut",
        "kyoto",
        "hotel",
        "bike",
        "guitar",
        "passport",
        "visa",
        "tax",
        "return",
        "school",
        "teacher",
        "birthday",
        "cake",
        "wedding",
        "flight",
        "doctor",
        "insurance",
        "mortgage",
        "piano",
        "lesson",
        "camping",
        "tent",
        "hiking",
        "boots",
        "marathon",
        "swim",
        "coffee",
        "tea",
        "京都",
        "旅行",
        "上次",
        "生日",
        "蛋糕",
        "牙医",
        "护照",
        "签证",
        "预算",
        "学校",
        "老师",
        "钢琴",
        "露营",
        "咖啡",
    ]
    lines = ["# MEMORY.md", "## Facts to keep"]
    for i in range(entries):
        terms = rng.sample(words, rng.randint(1, 4))
        importance = rng.randint(1, 5)
        lines.append(
            f"- 2026-01-{i % 28 + 1:02d}: fact number {i} about {' and '.join(terms)}. "
            f"<!-- trigger: {', '.join(terms)} --> <!-- importance: {importance} -->"
        )
    return "\n".join(lines) + "\n"


def fast_path_latency(entries: int, messages: list[str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        (workspace / "MEMORY.md").write_text(synthetic_memory(entries), encoding="utf-8")
        memory = ActiveMemory(
            model=None,  # type: ignore[arg-type]  # the fast path never calls it
            store=None,  # type: ignore[arg-type]
            tools=None,  # type: ignore[arg-type]
            workspace=workspace,
            config=AgentConfig(),
        )
        started = time.perf_counter()
        parsed = len(memory.triggers.index())
        cold_ms = (time.perf_counter() - started) * 1000
        times, hits = [], 0
        for message in messages:
            started = time.perf_counter()
            found = memory.fast_hits(message)
            times.append((time.perf_counter() - started) * 1000)
            hits += bool(found)
        times.sort()
        memory.config = AgentConfig(recall_mode="triggers")
        through_call = asyncio.run(_time_calls(memory, messages))
    return {
        "entries": parsed,
        "messages": len(messages),
        "messages_with_a_strong_hit": hits,
        "cold_parse_ms": cold_ms,
        "p50_ms": statistics.median(times),
        "p95_ms": times[int(0.95 * (len(times) - 1))],
        "max_ms": times[-1],
        # the same through `await memory(key, message)`: the worker-thread hop included
        "call_p50_ms": statistics.median(through_call),
        "call_p95_ms": through_call[int(0.95 * (len(through_call) - 1))],
    }


async def _time_calls(memory: ActiveMemory, messages: list[str]) -> list[float]:
    key = SessionKey.owner_main()
    times = []
    for message in messages:
        started = time.perf_counter()
        await memory(key, message)
        times.append((time.perf_counter() - started) * 1000)
    return sorted(times)


def deep_search(args: argparse.Namespace) -> dict[str, object]:
    conversations = locomo.load_locomo(args.locomo)
    rows: list[tuple[bool, dict[str, float]]] = []
    trusted = SearchFilter(("",), origins=TRUSTED_ORIGINS)
    for conv in conversations:
        files, locations = locomo.render_workspace(conv)
        root = args.out / conv.sample_id
        workspace = root / "workspace"
        write_workspace(workspace, files)
        config = MemoryConfig(embedding=EmbeddingConfig(provider=args.embedding))
        index = MemoryIndex.open(workspace, root / f"index-{args.embedding}.sqlite", config)
        try:
            index.sync()
            now = locomo.last_session_time(conv)
            for q in conv.questions:
                found = index.search(q.question, max_results=6, now=now, filter=trusted)
                hits = [
                    Hit(relative_hit_path(h.path, workspace), h.start_line, h.end_line, h.snippet)
                    for h in found
                ]
                evidence = [locations[i] for i in q.evidence]
                rows.append((bool(recall_intent(q.question)), score_locomo(hits, evidence)))
        finally:
            index.close()
        print(f"  {conv.sample_id}: {len(conv.questions)} questions searched", file=sys.stderr)

    def share(metric: str, only_intent: bool) -> float:
        picked = [s[metric] for intent, s in rows if intent or not only_intent]
        return sum(picked) / len(picked) if picked else 0.0

    fired = sum(intent for intent, _ in rows)
    return {
        "embedding": args.embedding,
        "questions": len(rows),
        "sent_to_deep_recall": fired,
        "seen_any@6": share("seen_any@6", False),
        "located_any@6": share("located_any@6", False),
        "seen_any@6_of_those_sent": share("seen_any@6", True),
        "in_front_of_the_model": sum(s["seen_any@6"] for i, s in rows if i) / len(rows),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    questions = [q.question for c in locomo.load_locomo(args.locomo) for q in c.questions]
    result: dict[str, object] = {
        "intent_en": intent_scores(
            questions, madial_user_utterances(args.madial_en), args.show_errors
        ),
        "intent_zh": intent_scores(
            ZH_POSITIVES, madial_user_utterances(args.madial_zh), args.show_errors
        ),
        "fast_path": fast_path_latency(args.entries, questions),
    }
    if not args.no_locomo_search:
        result["deep_search"] = deep_search(args)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    for name, values in result.items():
        print(f"{name}:")
        for key, value in values.items():  # type: ignore[attr-defined]
            shown = f"{value:.3f}" if isinstance(value, float) else str(value)
            print(f"  {key}: {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
