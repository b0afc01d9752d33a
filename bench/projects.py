"""Projects: does the active project's note come first when every project's notes share words?

    .venv/bin/python bench/projects.py --quick       # < 1 minute: the default and a few boosts
    .venv/bin/python bench/projects.py               # a finer sweep of `project_boost`
    .venv/bin/python bench/projects.py --embedding use --json

A synthetic workspace: three projects ("renovation", "apollo", "wedding") with one note each on
the same 20 topics — 10 in English ("the budget", "the deadline", "the contractor", "the
database", …) and 10 in Chinese (预算, 截止日期, 承包商, 数据库, …) — worded alike, differing
only in their details (amounts, names, dates). A project's notes sit in three kinds of places,
tagged the three ways: a MEMORY.md section (tag on its heading), daily-log entries (tag on the
entry) and session notes (tag on the title). Untagged notes of the owner's own life share the
words too ("my personal budget"), and 10 questions are about them.

Each project is asked its 20 questions ("What did we decide about the budget?" — never naming
the project). Scored: top-1 and top-3 precision for the project's note, in four ways:
*today* (the same workspace without its tags, searched as main searches it), *tagged, no
project* (tags present, no active project: must equal today up to chunking), and *project
active* with `project_boost` at several values. *untagged @1*: the 10 questions about untagged
notes asked with each project active — what a higher boost costs (a tagged note of the active
project pushed above the untagged note asked for).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from memory.index.index import MemoryIndex
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.search.hybrid import SearchHit
from memory.search.presets import get_preset

PROJECTS = ("renovation", "apollo", "wedding")
TODAY = date(2026, 6, 1)
NOW = datetime(2026, 6, 1, 12, 0)
QUICK_BOOSTS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)
FULL_BOOSTS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0)
_MARKER = re.compile(r" ?<!-- project: [a-z0-9-]+ -->")

NAMES = ["Marek", "Ilse", "Tomás", "Priya", "Jonas", "Aiko", "Bruno", "Sofia", "Henrik", "Lena"]
ZH_NAMES = ["王磊", "李娜", "张伟", "刘洋", "陈静", "杨帆", "赵敏", "黄强", "周婷", "吴昊"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
ZH_DAYS = ["周一", "周二", "周三", "周四", "周五"]
PLACES = ["Baumarkt Nord", "Hafen Supply", "Office Direct", "Green Depot", "Kraft & Co"]
ZH_PLACES = ["东方建材", "华联供应", "北城五金", "金星商行", "长江物流"]
DBS = ["PostgreSQL 16", "MySQL 8", "SQLite", "MongoDB 7", "MariaDB 11"]
WORDS = ["Lighthouse", "Bluebird", "Orchard", "Quarry", "Harbour", "Meadow", "Summit", "Delta"]
ZH_WORDS = ["灯塔", "青鸟", "果园", "石场", "海港", "草地", "山顶", "三角洲"]

# (note template, question) — {a}, {b}: details drawn per project.
ENGLISH = [
    ("We decided the budget is {n} euros.", "What did we decide about the budget?"),
    ("The deadline is {date}.", "When is the deadline?"),
    ("The contractor is {name}; he starts on {date}.", "Who is the contractor?"),
    ("The database runs on {db}.", "Which database do we use?"),
    ("The weekly meeting is on {day} at {hour}:00.", "When is the weekly meeting?"),
    ("The last invoice was {n} euros, paid by bank transfer.", "How much was the last invoice?"),
    ("We order supplies from {place}.", "Where do we order supplies?"),
    ("The insurance policy number is {code}.", "What is the insurance policy number?"),
    ("For urgent questions call {name} at +49 170 {n}.", "Who do I call for urgent questions?"),
    ("The shared drive folder is called {word}.", "What is the shared drive folder called?"),
]
CHINESE = [
    ("我们决定预算是{n}元。", "我们对预算做了什么决定？"),
    ("截止日期是{zdate}。", "截止日期是什么时候？"),
    ("承包商是{zname}，{zdate}开工。", "承包商是谁？"),
    ("数据库用的是{db}。", "我们用的是哪个数据库？"),
    ("每周例会在{zday}{hour}点。", "每周例会是什么时候？"),
    ("上一张发票是{n}元，已经转账支付。", "上一张发票多少钱？"),
    ("我们从{zplace}订购材料。", "我们从哪里订购材料？"),
    ("保险单号是{code}。", "保险单号是多少？"),
    ("紧急问题打电话给{zname}，电话{n}。", "紧急问题找谁？"),
    ("共享文件夹叫{zword}。", "共享文件夹叫什么？"),
]
# Untagged notes of the owner's own life, sharing the words, and their questions.
PERSONAL = [
    ("My personal budget for groceries is 400 euros a month.", "What is my grocery budget?"),
    ("The tax return deadline is July 31st.", "When is the tax return deadline?"),
    ("Anna is allergic to peanuts.", "What is Anna allergic to?"),
    ("The dentist appointment is on Tuesday at 9:00.", "When is the dentist appointment?"),
    ("My car insurance renews in October.", "When does my car insurance renew?"),
    ("我每个月的私人预算是三千元。", "我每个月的私人预算是多少？"),
    ("妈妈的生日是十月三日。", "妈妈的生日是哪天？"),
    ("体检安排在下周四上午。", "体检是什么时候？"),
    ("家里的无线网络叫小橘子。", "家里的无线网络叫什么？"),
    ("健身房的会员卡号是八八六一。", "健身房的会员卡号是多少？"),
]


@dataclass(frozen=True)
class Question:
    text: str
    path: str
    line: int  # the target note's line (1-based)
    project: str | None
    lang: str  # "en" | "zh"


def _details(rng: random.Random) -> dict[str, object]:
    d = TODAY + timedelta(days=rng.randint(10, 200))
    return {
        "n": rng.randint(1_000, 99_000),
        "date": f"{d:%B} {d.day}",
        "zdate": f"{d.month}月{d.day}日",
        "name": rng.choice(NAMES),
        "zname": rng.choice(ZH_NAMES),
        "db": rng.choice(DBS),
        "day": rng.choice(DAYS),
        "zday": rng.choice(ZH_DAYS),
        "hour": rng.randint(8, 17),
        "place": rng.choice(PLACES),
        "zplace": rng.choice(ZH_PLACES),
        "code": f"{rng.choice('ABCDEFGH')}{rng.randint(100_000, 999_999)}",
        "word": rng.choice(WORDS),
        "zword": rng.choice(ZH_WORDS),
    }


def build(seed: int = 7) -> tuple[dict[str, str], list[Question]]:
    """The workspace (path → text, tags included) and every question with its target line."""
    rng = random.Random(seed)
    memory = ["# MEMORY.md", "", "## Me", ""]
    questions: list[Question] = []
    logs: dict[str, list[str]] = {}
    notes: dict[str, list[str]] = {}
    for text, question in PERSONAL:
        memory.append(f"- {text}")
        lang = "zh" if re.search(r"[\u4e00-\u9fff]", text) else "en"
        questions.append(Question(question, "MEMORY.md", len(memory), None, lang))
    memory.append("")
    topics = [(t, q, "en") for t, q in ENGLISH] + [(t, q, "zh") for t, q in CHINESE]
    for p, project in enumerate(PROJECTS):
        section = [f"## {project.title()} <!-- project: {project} -->", ""]
        for i, (template, question, lang) in enumerate(topics):
            note = template.format(**_details(rng))
            where = (i + p) % 3  # each project's topics spread over the three places
            if where == 0:
                section.append(f"- {note}")
                line = len(memory) + len(section)  # the section goes after what is there
                questions.append(Question(question, "MEMORY.md", line, project, lang))
            elif where == 1:
                day = TODAY - timedelta(days=rng.randint(1, 60))
                path = f"memory/{day.isoformat()}.md"
                lines = logs.setdefault(path, [f"# {day.isoformat()}", ""])
                lines.append(f"- {note} <!-- project: {project} -->")
                questions.append(Question(question, path, len(lines), project, lang))
            else:
                day = TODAY - timedelta(days=rng.randint(1, 60))
                path = f"memory/{day.isoformat()}-{project}-sync.md"
                lines = notes.setdefault(
                    path, [f"# Session {day.isoformat()} <!-- project: {project} -->", ""]
                )
                ask = "有什么新消息？" if lang == "zh" else "Any news on this?"
                lines += [f"**Owner**: {ask}", "", f"**Assistant**: {note}", ""]
                questions.append(Question(question, path, len(lines) - 1, project, lang))
        memory += [*section, ""]
    files = {"MEMORY.md": "\n".join(memory) + "\n"}
    files |= {path: "\n".join(lines) + "\n" for path, lines in {**logs, **notes}.items()}
    return files, questions


def write(root: Path, files: dict[str, str], *, tags: bool) -> Path:
    for rel, text in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text if tags else _MARKER.sub("", text), encoding="utf-8")
    return root


def found_at(hits: list[SearchHit], q: Question) -> int | None:
    """1-based rank of the first hit covering the question's target line (None: not found)."""
    for rank, h in enumerate(hits, start=1):
        if h.path == q.path and h.start_line <= q.line <= h.end_line:
            return rank
    return None


def precision(ranks: list[int | None], k: int) -> float:
    return 100.0 * sum(1 for r in ranks if r is not None and r <= k) / max(1, len(ranks))


def run(embedding: str, boosts: tuple[float, ...]) -> dict[str, object]:
    files, questions = build()
    asked = [q for q in questions if q.project is not None]
    personal = [q for q in questions if q.project is None]
    config = MemoryConfig(embedding=EmbeddingConfig(provider=embedding))  # type: ignore[arg-type]
    pinch = get_preset("pinch")
    rows: list[dict[str, object]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        today = MemoryIndex.open(write(base / "today", files, tags=False), base / "t.db", config)
        tagged = MemoryIndex.open(write(base / "tagged", files, tags=True), base / "p.db", config)
        try:
            today.sync()
            tagged.sync()

            def score(name: str, idx: MemoryIndex, boost: float | None) -> dict[str, object]:
                preset = pinch.with_overrides(project_boost=boost or 0.0)
                ranks = {}
                for q in asked:
                    project = q.project if boost is not None else None
                    hits = idx.search(q.text, preset=preset, now=NOW, record=False, project=project)
                    ranks[q] = found_at(hits, q)
                cross = [
                    found_at(idx.search(q.text, preset=preset, now=NOW, record=False, project=p), q)
                    for q in personal
                    for p in (PROJECTS if boost is not None else (None,))
                ]
                row: dict[str, object] = {"mode": name, "boost": boost}
                for lang in ("en", "zh", "all"):
                    picked = [r for q, r in ranks.items() if lang in ("all", q.lang)]
                    row[f"{lang}@1"] = round(precision(picked, 1), 1)
                    row[f"{lang}@3"] = round(precision(picked, 3), 1)
                row["untagged@1"] = round(precision(cross, 1), 1)
                return row

            rows.append(score("today (no tags)", today, None))
            rows.append(score("tagged, no project", tagged, None))
            for b in boosts:
                rows.append(score("project active", tagged, b))
            default = pinch.project_boost
            if default not in boosts:
                rows.append(score("project active", tagged, default))
        finally:
            today.close()
            tagged.close()
    return {
        "embedding": embedding,
        "questions": len(asked),
        "untagged_questions": len(personal),
        "default_boost": pinch.project_boost,
        "seconds": round(time.monotonic() - started, 1),
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few boost values (< 1 minute)")
    parser.add_argument("--embedding", default="local", help="local (default), use, none")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.embedding, QUICK_BOOSTS if args.quick else FULL_BOOSTS)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return
    print(
        f"{result['questions']} project questions (20 per project, EN+ZH), "
        f"{result['untagged_questions']} about untagged notes × 3 projects; embedding "
        f"{result['embedding']}; default project_boost {result['default_boost']}; "
        f"{result['seconds']} s"
    )
    print("| mode | boost | top-1 all | top-3 all | top-1 en | top-1 zh | untagged top-1 |")
    print("|---|---|---|---|---|---|---|")
    for r in result["rows"]:  # type: ignore[attr-defined]
        boost = "—" if r["boost"] is None else f"{r['boost']:g}"
        print(
            f"| {r['mode']} | {boost} | {r['all@1']} % | {r['all@3']} % | {r['en@1']} % | "
            f"{r['zh@1']} % | {r['untagged@1']} % |"
        )


if __name__ == "__main__":
    main()
