"""Do facts survive compaction when nobody saves them? A 300-turn conversation, then 50 questions.

    .venv/bin/python bench/compaction_survival.py                      # use and none
    .venv/bin/python bench/compaction_survival.py --embedding local    # slow: e5 on the CPU
    .venv/bin/python bench/compaction_survival.py --json

Offline: the real `Agent` and `AnthropicClient` talk to the project's scripted model server on
127.0.0.1, over a copy of `workspace_template/` and a fresh agent database per provider.

The conversation: `--turns` owner messages (default 300); `--facts` of them (default 50, spread
over the first 2/3 of the conversation, the rest filler) each state one distinct fact ("My
locker code at the gym is 4471"), which the assistant merely acknowledges ("Got it."). Filler
turns are generated chit-chat and requests with answers of 60-200 words. A small context window
(default 12,000 tokens, reserve 2,000, soft 1,000: compaction at 9,000) makes the agent flush
and compact many times. The scripted model is as unhelpful as it can be: every memory flush
answers NO_REPLY (nothing is stored), every summary is the same short text with every section
"- none" (everything is lost from the summary), no turn calls a tool.

Then, for every fact, a natural question ("What's my gym locker code?") goes to `memory_search`
exactly as the model's tool call would (`agent.tools.call`, the owner's session, default
max_results = 6), and the fact counts as found when its sentence (case and whitespace
normalised) is inside one of the returned snippets — i.e. the model would read it. Only the
transcript chunks that compaction indexes can answer: nothing else holds the facts.

With `--active-memory escalate,always`, each question is then also asked as an owner turn in
which the scripted model calls no tool, with Active Memory in that recall mode: found = the
fact's sentence is in the recalled block in front of the message. The deep-recall sub-call is
scripted to do the least a model could (search with the owner's words, answer with the two
result lines sharing most words with them).

Reported per embedding provider: turns, compactions, flushes (and how many stored anything),
summary requests, session resets, how many facts had left the live context, the fraction found
(target 100 %), and timings. Misses are listed with the top hit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from rich.console import Console
from rich.table import Table

from agent.active_memory import DEEP_ROUNDS, SUMMARY_CHARS, ActiveMemory
from agent.clock import Clock
from agent.config import AgentConfig
from agent.model import AnthropicClient
from agent.prompts import render
from agent.runtime import RESET_NOTICE, Agent
from agent.tools import ToolContext
from agent.types import ToolCall
from memory.config import EmbeddingConfig, MemoryConfig
from memory.index import MemoryIndex
from memory.sessions import SessionKey, SessionStore
from memory.text import line_terms, query_terms, stem_term
from tests.fakes.model_server import (
    FakeModelServer,
    RecordedRequest,
    Reply,
    text_reply,
    tool_reply,
)

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "workspace_template"
MODEL = "claude-bench"
OWNER = SessionKey.owner_cli()
TOP_K = 6
MIN_COMPACTIONS = 5
LOSSY_SUMMARY = (
    "## Decisions\n- none\n## Open TODOs\n- none\n## Constraints/Rules\n- none\n"
    "## Pending user asks\n- none\n## Exact identifiers\n- none"
)

Result = dict[str, Any]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---- the facts and the conversation ------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    text: str  # the sentence planted in the owner's message, and looked for in snippets
    question: str  # how the owner would ask about it later


FACTS: tuple[Fact, ...] = (
    Fact("My locker code at the gym is 4471", "What's my gym locker code?"),
    Fact("Aunt Mira's birthday is on 12 March", "When is Aunt Mira's birthday?"),
    Fact("My passport expires on 3 September 2029", "When does my passport expire?"),
    Fact("The Wi-Fi network at the cabin is called PineHollow5G", "What's the cabin Wi-Fi called?"),
    Fact("My dentist is Dr. Okafor on Linden Street", "Who is my dentist?"),
    Fact("Our licence plate is B-KX 2093", "What's our licence plate?"),
    Fact("I'm allergic to penicillin", "Which medicine am I allergic to?"),
    Fact("My bike lock combination is 0-7-3-9", "What's the combination of my bike lock?"),
    Fact("School pickup on Thursdays is at 15:40", "What time is school pickup on Thursday?"),
    Fact("Lena's favourite flowers are ranunculus", "What are Lena's favourite flowers?"),
    Fact(
        "My Lufthansa frequent flyer number is 992 0471 3385",
        "What's my frequent flyer number with Lufthansa?",
    ),
    Fact("The plumber we liked was Henrik Sauer", "What was the name of the plumber we liked?"),
    Fact("Our wedding anniversary is on 21 June", "When is our wedding anniversary?"),
    Fact("My shoe size is EU 43", "What's my shoe size?"),
    Fact(
        "The spare house key is under the blue flowerpot by the shed",
        "Where did we hide the spare house key?",
    ),
    Fact("My blood type is A negative", "What's my blood type?"),
    Fact("Tomasz takes his coffee black with no sugar", "How does Tomasz take his coffee?"),
    Fact(
        "The book club meets on the first Tuesday of every month at Café Amsel",
        "When does the book club meet?",
    ),
    Fact("My employee ID at work is E-58213", "What's my employee ID?"),
    Fact(
        "The landlord, Mrs. Petrović, prefers texts over calls",
        "How should I contact the landlord?",
    ),
    Fact(
        "Our cat Biscuit gets her thyroid pill every morning at 8",
        "When does Biscuit get her thyroid pill?",
    ),
    Fact(
        "The camper van is parked at storage unit 17 in Hallbergmoos",
        "Where is the camper van parked?",
    ),
    Fact(
        "My goal this year is a half marathon under 1:55",
        "What's my half marathon goal this year?",
    ),
    Fact(
        "The insurance policy number for the flat is HV-7730-2215",
        "What's the policy number of the flat's insurance?",
    ),
    Fact(
        "Grandpa Jakob's hearing aid takes size 312 batteries",
        "What size batteries does Grandpa Jakob's hearing aid take?",
    ),
    Fact("My sister Clara moved to Lisbon in October", "Where did Clara move?"),
    Fact(
        "I prefer a window seat on flights longer than three hours",
        "Which seat do I like on long flights?",
    ),
    Fact("The router admin page is at 192.168.178.1", "What's the router admin address?"),
    Fact(
        "Our neighbour Ravi waters the plants when we travel",
        "Who waters our plants when we're away?",
    ),
    Fact("My yoga class with Ines is on Wednesdays at 7 pm", "When is my yoga class?"),
    Fact(
        "The tax advisor needs our documents by 15 May",
        "When does the tax advisor need our documents?",
    ),
    Fact("Mum's favourite cake is plum crumble", "What's Mum's favourite cake?"),
    Fact(
        "My glasses prescription is -2.25 left and -2.0 right",
        "What's my glasses prescription?",
    ),
    Fact(
        "The garage door remote is set to channel 4",
        "Which channel is the garage door remote on?",
    ),
    Fact(
        "The booking reference for the Vienna hotel is QX7M2P",
        "What's the booking reference of the hotel in Vienna?",
    ),
    Fact(
        "We painted the hallway in Farrow & Ball Skimming Stone",
        "What paint colour did we use in the hallway?",
    ),
    Fact("Jonas is vegetarian but eats fish", "Does Jonas eat fish?"),
    Fact(
        "My bank's customer service number is 089 4412 900",
        "What's the customer service number of my bank?",
    ),
    Fact(
        "The boiler's annual maintenance is due every November",
        "When is the boiler maintenance due?",
    ),
    Fact(
        "I take 10 mg of cetirizine for hay fever in spring",
        "What do I take for my hay fever?",
    ),
    Fact(
        "Our holiday rental in Sardinia is booked from 2 to 16 August",
        "When is the Sardinia rental booked?",
    ),
    Fact(
        "My old laptop's serial number is C02XK1ZJJG5H",
        "What's the serial number of my old laptop?",
    ),
    Fact(
        "Felix's football training ends at 18:15 on Mondays",
        "When does Felix's football training end?",
    ),
    Fact("I promised to lend Marta our camping stove in July", "What did I promise to lend Marta?"),
    Fact("My pharmacy is the Rosen-Apotheke on Hauptplatz", "Which pharmacy do I use?"),
    Fact(
        "The piano tuner comes every April and charges 120 euros",
        "How much does the piano tuner charge?",
    ),
    Fact("My library card number is 2210 8876 4410", "What's my library card number?"),
    Fact(
        "We keep the emergency cash in the red tin in the pantry",
        "Where do we keep the emergency cash?",
    ),
    Fact(
        "Oskar's pediatrician appointment is on 9 April at 10:30",
        "When is Oskar's appointment at the pediatrician?",
    ),
    Fact(
        "My usual pizza order is a quattro formaggi with extra rocket",
        "What's my usual pizza order?",
    ),
)

FACT_WRAPPERS = (
    "Oh, before I forget: {fact}.",
    "Something to keep in mind: {fact}.",
    "Random note for later — {fact}.",
    "{fact}, by the way.",
    "Can you remember this for me? {fact}.",
    "Quick one: {fact}. No need to do anything with it now.",
    "Just so it's somewhere: {fact}.",
)
FACT_ACKS = (
    "Got it.",
    "Thanks, noted.",
    "Okay, good to know!",
    "Understood — thanks for telling me.",
    "Alright, got that.",
)

TOPICS = (
    "the quarterly report",
    "the garden fence",
    "dinner on Saturday",
    "the new vacuum cleaner",
    "my presentation for the team offsite",
    "the kitchen renovation",
    "a weekend trip to the mountains",
    "learning Italian",
    "the broken dishwasher",
    "my reading list",
    "the neighbourhood summer party",
    "switching electricity providers",
    "a colleague's farewell gift",
    "the kids' screen time",
    "cleaning out the basement",
    "a new desk chair",
    "the photo album for my parents",
    "meal prep for the week",
    "the team's hiring plan",
    "the balcony tomatoes",
    "my sleep schedule",
    "a podcast about history",
    "the budget spreadsheet",
    "selling the old sofa",
    "winter tyres for the car",
    "my gym routine",
    "the birthday party for a friend's son",
    "a cheaper phone plan",
    "the leaking bathroom tap",
    "a birdhouse for the garden",
    "planning a board game night",
    "the conference in autumn",
    "organising my email inbox",
    "a thank-you note for the teacher",
    "repainting the bedroom",
    "the charity run in spring",
)
FILLER_ASKS = (
    "Can you help me think through {topic}?",
    "I keep putting off {topic}. Any advice on where to start?",
    "What would you suggest for {topic}? I only have an hour or so today.",
    "Let's talk about {topic} for a moment — I'm a bit stuck.",
    "Give me three quick ideas for {topic}, please.",
    "I was discussing {topic} with a friend yesterday and we disagreed. What do you think?",
    "Is there a smarter way to handle {topic} than what I'm doing now?",
    "Remind me what matters most when it comes to {topic}?",
    "How long would {topic} realistically take if I did it properly?",
    "Can you make me a short checklist for {topic}?",
)
FILLER_DETAILS = (
    "I'd like to keep it simple.",
    "Money is a bit tight this month.",
    "I have more time on the weekend than during the week.",
    "Last time it took much longer than I expected.",
    "Ideally I'd finish before the end of the month.",
    "I don't want to buy anything new if I can avoid it.",
    "My partner has opinions about this too, so keep it flexible.",
    "",
    "",
)
ADVICE = (
    "Start with the smallest step you can finish today, so the rest feels lighter.",
    "Write down what done looks like before you begin; it keeps the scope honest.",
    "Block a fixed time slot in your calendar and treat it like an appointment.",
    "If it involves other people, ask them early — waiting on answers is what usually slows "
    "things down.",
    "Compare two or three options at most; more choice mostly costs time.",
    "Keep a short list of open questions and settle them one at a time.",
    "Set a budget ceiling first, then look for what fits under it.",
    "Do the unpleasant part first while your energy is highest.",
    "Check whether something you already own could do the job.",
    "Split it into a preparation part and a doing part; they need different moods.",
    "A rough plan that you follow beats a perfect plan that you postpone.",
    "Take a photo or note of the current state so you can see the progress later.",
    "If you get stuck for more than ten minutes, switch to another item and come back.",
    "Ask someone who has done it recently; their tips are usually the most practical.",
    "Leave some buffer: most tasks take about half again as long as planned.",
    "Celebrate the milestones a little — it helps you keep going.",
    "Keep the tools or documents you need in one place before you start.",
    "Decide what you will not do, so the important parts get your attention.",
    "Review after a week and adjust instead of trying to get it right at once.",
    "Think about what could go wrong and prepare one fallback for it.",
)
OPENERS = (
    "Good question about {topic}.",
    "Sure, let's look at {topic}.",
    "Here's how I'd approach {topic}.",
    "For {topic}, a few thoughts.",
    "Happy to help with {topic}.",
)
CLOSERS = (
    "Want me to turn this into a checklist?",
    "Tell me how it goes.",
    "Shall we go through the first step together?",
    "",
    "",
)


@dataclass(frozen=True)
class Turn:
    user: str
    answer: str
    fact: int | None = None  # index into FACTS when this turn plants one


def conversation(turns: int, facts: int, seed: int) -> list[Turn]:
    """`turns` owner messages; `facts` of them plant one fact each, spread over the first 2/3."""
    rng = random.Random(seed)
    span = max(facts, turns * 2 // 3)
    step = span / max(facts, 1)
    fact_at = {min(int(i * step + rng.random() * step * 0.5), turns - 1): i for i in range(facts)}
    out: list[Turn] = []
    for n in range(turns):
        if n in fact_at:
            fact = FACTS[fact_at[n]]
            wrapper = rng.choice(FACT_WRAPPERS)
            text = wrapper.format(fact=fact.text if wrapper[0] == "{" else _lower_first(fact.text))
            out.append(Turn(text, rng.choice(FACT_ACKS), fact_at[n]))
            continue
        topic = rng.choice(TOPICS)
        ask = rng.choice(FILLER_ASKS).format(topic=topic)
        detail = rng.choice(FILLER_DETAILS)
        user = f"{ask} {detail}".strip()
        advice = rng.sample(ADVICE, rng.randint(3, 7))
        answer = " ".join(
            s for s in (rng.choice(OPENERS).format(topic=topic), *advice, rng.choice(CLOSERS)) if s
        )
        # A message number keeps every turn distinct, as real messages are.
        out.append(Turn(f"{user} ({n + 1})", answer))
    return out


def _lower_first(text: str) -> str:
    # "My locker…" → "my locker…", but names ("Aunt Mira's", "Lena's") keep their capital.
    first, _, rest = text.partition(" ")
    if first in ("My", "Our", "The", "We", "I"):
        first = first if first == "I" else first.lower()
    return f"{first} {rest}"


# ---- the scripted model ------------------------------------------------------------------------


def _newest_user_text(request: RecordedRequest) -> str:
    """The last text block of the newest user message (the flush prompt comes last, and a
    compaction summary comes first, in the same message)."""
    for message in reversed(request.body.get("messages", [])):
        if message.get("role") != "user":
            continue
        texts = [b["text"] for b in message["content"] if b.get("type") == "text"]
        if texts:
            return str(texts[-1])
    return ""


class ScriptedModel:
    """Answers turns from the script, every flush with NO_REPLY, every summary with
    LOSSY_SUMMARY; counts each kind of request."""

    def __init__(self, turns: Sequence[Turn]) -> None:
        self.answers = {t.user: t.answer for t in turns}
        self.summary_instructions = render("summary")
        # The flush prompt's first line carries no date.
        self.flush_opening = render("flush", today=date(2000, 1, 1)).split("\n", 1)[0]
        self.recall_instructions = render("recall", rounds=DEEP_ROUNDS - 1, max_chars=SUMMARY_CHARS)
        self.counts = {"turn": 0, "flush": 0, "summary": 0, "recall": 0, "unknown": 0}

    def __call__(self, request: RecordedRequest) -> Reply:
        if request.system_text() == self.recall_instructions:
            self.counts["recall"] += 1
            return recall_reply(request)
        if request.system_text() == self.summary_instructions:
            self.counts["summary"] += 1
            return text_reply(LOSSY_SUMMARY)
        text = _newest_user_text(request)
        if text.startswith(self.flush_opening):
            self.counts["flush"] += 1
            return text_reply("NO_REPLY")
        answer = self.answers.get(text)
        if answer is None:
            self.counts["unknown"] += 1
            return text_reply("Sorry, I lost the thread there.")
        self.counts["turn"] += 1
        return text_reply(answer)


def recall_reply(request: RecordedRequest) -> Reply:
    """The deep-recall sub-call of a model that does the least a model could: search with the
    owner's words, then answer with the two result lines sharing most words with them."""
    messages = request.body.get("messages", [])
    first = messages[0]["content"]
    opening = first if isinstance(first, str) else first[-1]["text"]
    question = opening.rsplit("The owner's newest message:\n", 1)[-1].strip()
    results = [
        block["content"]
        for m in messages
        if isinstance(m.get("content"), list)
        for block in m["content"]
        if block.get("type") == "tool_result"
    ]
    if not results:
        return tool_reply("memory_search", {"query": question})
    content = results[-1]
    raw = content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
    try:
        hits = json.loads(raw).get("results", [])
    except json.JSONDecodeError:
        hits = []
    wanted = {stem_term(t) for t in query_terms(question)}
    lines = [line for h in hits for line in str(h.get("snippet", "")).split("\n")]
    scored = sorted(
        ((len(wanted & line_terms(line.lower())), -i, line) for i, line in enumerate(lines)),
        reverse=True,
    )
    best = [line.strip() for score, _, line in scored[:2] if score > 0]
    return text_reply(" / ".join(best)[:SUMMARY_CHARS] if best else "NONE")


async def ask_with_active_memory(
    agent: Agent, store: SessionStore, model: ScriptedModel, turns: Sequence[Turn], mode: str
) -> Result:
    """Each fact's question as an owner turn, the model calling no tool in it: is the fact in
    the recalled block Active Memory put in front of the message?"""
    memory = ActiveMemory(
        model=agent.model,
        store=store,
        tools=agent.tools,
        workspace=agent.workspace,
        config=agent.config.model_copy(update={"recall_mode": mode}),
    )
    agent.recall = memory
    rows = []
    for turn in turns:
        if turn.fact is None:
            continue
        fact = FACTS[turn.fact]
        model.answers[fact.question] = "OK."
        await agent.handle(OWNER, fact.question)
        session = store.current(OWNER)
        asked = store.events(session.id, kinds=("user",))[-1].content
        report = memory.last_turn(OWNER)
        rows.append(
            {
                "question": fact.question,
                "found": _normalise(fact.text) in _normalise(str(asked.get("recalled") or "")),
                "deep": report.deep if report else None,
            }
        )
    agent.recall = None
    found = sum(1 for r in rows if r["found"])
    deep: dict[str, int] = {}
    for r in rows:
        deep[str(r["deep"])] = deep.get(str(r["deep"]), 0) + 1
    return {
        "mode": mode,
        "found": found,
        "found_share": found / len(rows) if rows else 0.0,
        "deep": deep,
        "misses": [r["question"] for r in rows if not r["found"]],
    }


# ---- one run -----------------------------------------------------------------------------------


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


async def run_once(provider: str, args: argparse.Namespace, root: Path) -> Result:
    turns = conversation(args.turns, args.facts, args.seed)
    workspace = root / "workspace"
    shutil.copytree(TEMPLATE, workspace)
    (workspace / "memory").mkdir(exist_ok=True)
    memory = MemoryConfig(embedding=EmbeddingConfig(provider=provider))  # type: ignore[arg-type]
    index = MemoryIndex.open(workspace, root / "agent.sqlite", memory)
    store = SessionStore(index.db)
    config = AgentConfig(
        model=MODEL,
        context_window=args.context_window,
        reserve_floor=args.reserve_floor,
        soft_threshold=args.soft_threshold,
    )
    model = ScriptedModel(turns)
    # As at start-up: the workspace is indexed before the first message. (Left to the first
    # search instead, that build would replay every transcript and hide what compaction missed.)
    started = time.perf_counter()
    await asyncio.to_thread(index.sync)
    index_s = time.perf_counter() - started
    started = time.perf_counter()
    with FakeModelServer() as server:
        server.respond_with(model)
        client = AnthropicClient(MODEL, api_key="bench-key", base_url=server.url, max_retries=0)
        agent = Agent(
            model=client,
            store=store,
            index=index,
            workspace=workspace,
            config=config,
            clock=Clock(),
        )
        resets = compacted_turns = 0
        for n, turn in enumerate(turns, 1):
            reply = await agent.handle(OWNER, turn.user)
            compacted_turns += reply.compacted
            resets += reply.text.startswith(RESET_NOTICE)
            if n % 50 == 0:
                log(f"  [{provider}] turn {n}/{len(turns)}")
        talk_s = time.perf_counter() - started
        rows, _, _, sessions, events, flushes, search_s = await _search_facts(agent, store, turns)
        active_memory = []
        for mode in args.active_memory:
            log(f"  [{provider}] asking with Active Memory, recall_mode {mode}")
            active_memory.append(await ask_with_active_memory(agent, store, model, turns, mode))
        await client.aclose()
    index.close()

    found = sum(1 for r in rows if r["found"])
    away = [r for r in rows if not r["in_live_context"]]
    return {
        "embedding": provider,
        "turns": len(turns),
        "requests": dict(model.counts),
        "compactions": sum(1 for e in events if e.kind == "compaction"),
        "compacted_turns": compacted_turns,
        "flushes": len(flushes),
        "flushes_that_stored": sum(1 for e in flushes if e.content.get("appended")),
        "resets": resets,
        "sessions": len(sessions),
        "facts": len(rows),
        "facts_compacted_away": len(away),
        "found": found,
        "found_share": found / len(rows) if rows else 0.0,
        "found_compacted_away": sum(1 for r in away if r["found"]),
        "found_at_1": sum(1 for r in rows if r["rank"] == 1),
        "index_s": round(index_s, 2),
        "talk_s": round(talk_s, 2),
        "search_ms": round(1000 * search_s / max(len(rows), 1), 1),
        "total_s": round(index_s + talk_s + search_s, 2),
        "enough_compactions": sum(1 for e in events if e.kind == "compaction") >= MIN_COMPACTIONS,
        "misses": [r for r in rows if not r["found"]],
        "facts_detail": rows,
        "active_memory": active_memory,
    }


async def _search_facts(agent: Agent, store: SessionStore, turns: Sequence[Turn]) -> Any:
    """Every fact's question through memory_search, as the model's tool call would run it."""
    sessions = store.history(OWNER)
    events = [e for s in sessions for e in store.events(s.id, kinds=("flush", "compaction"))]
    flushes = [e for e in events if e.kind == "flush"]
    current = sessions[-1]
    latest = store.latest_compaction(current.id)
    first_kept = int(latest.content["first_kept_seq"]) if latest else 0
    live = {
        str(e.content.get("text"))
        for e in store.events(current.id, after_seq=max(0, first_kept - 1), kinds=("user",))
    }

    searched = time.perf_counter()
    ctx = ToolContext(OWNER, current.id)
    rows = []
    for turn in turns:
        if turn.fact is None:
            continue
        fact = FACTS[turn.fact]
        call = ToolCall(f"q{turn.fact}", "memory_search", {"query": fact.question})
        result = await agent.tools.call(call, ctx)
        hits = [] if result.is_error else json.loads(result.content).get("results", [])
        wanted = _normalise(fact.text)
        rank = next(
            (i for i, h in enumerate(hits[:TOP_K], 1) if wanted in _normalise(h["snippet"])), None
        )
        rows.append(
            {
                "fact": fact.text,
                "question": fact.question,
                "found": rank is not None,
                "rank": rank,
                "in_live_context": turn.user in live,
                "top_hit": f"{hits[0]['path']}:{hits[0]['lines']}" if hits else None,
                "top_snippet": hits[0]["snippet"][:160] if hits else None,
                "error": result.content if result.is_error else None,
            }
        )
    search_s = time.perf_counter() - searched
    return rows, live, current, sessions, events, flushes, search_s


# ---- output -----------------------------------------------------------------------------------


SUMMARY_ROWS: tuple[tuple[str, Callable[[Result], str]], ...] = (
    ("owner turns", lambda r: str(r["turns"])),
    (
        "compactions",
        lambda r: f"{r['compactions']}" + ("" if r["enough_compactions"] else " (< 5!)"),
    ),
    (
        "flushes (that stored)",
        lambda r: f"{r['flushes']} ({r['flushes_that_stored']})",
    ),
    ("summary requests", lambda r: str(r["requests"]["summary"])),
    ("session resets", lambda r: str(r["resets"])),
    ("facts out of context", lambda r: f"{r['facts_compacted_away']}/{r['facts']}"),
    ("found in the top 6", lambda r: f"{r['found']}/{r['facts']} = {r['found_share']:.0%}"),
    ("found at rank 1", lambda r: f"{r['found_at_1']}/{r['facts']}"),
    ("index workspace, s", lambda r: f"{r['index_s']:.1f}"),
    ("conversation, s", lambda r: f"{r['talk_s']:.1f}"),
    ("one search, ms", lambda r: f"{r['search_ms']:.1f}"),
    ("total, s", lambda r: f"{r['total_s']:.1f}"),
)


def summary_table(results: Sequence[Result]) -> Table:
    table = Table(title="Compaction survival: facts said once, never saved, asked for at the end")
    table.add_column("embedding")
    for r in results:
        table.add_column(r["embedding"], justify="right")
    for label, cell in SUMMARY_ROWS:
        table.add_row(label, *("—" if "error" in r else cell(r) for r in results))
    if any("error" in r for r in results):
        table.add_row("error", *(r.get("error", "")[:60] for r in results))
    return table


def misses_table(result: Result) -> Table:
    table = Table(title=f"Missed with {result['embedding']}")
    for column in ("question", "fact", "still in context", "top hit", "top snippet"):
        table.add_column(column)
    for m in result["misses"]:
        table.add_row(
            m["question"],
            m["fact"],
            "yes (not compacted yet)" if m["in_live_context"] else "no",
            m["top_hit"] or "—",
            m["top_snippet"] or "—",
        )
    return table


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--embedding",
        default="use,none",
        help="comma-separated providers to run: use, none, local (slow) (default: use,none)",
    )
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--facts", type=int, default=len(FACTS), help=f"1-{len(FACTS)}")
    parser.add_argument("--context-window", type=int, default=12_000)
    parser.add_argument("--reserve-floor", type=int, default=2_000)
    parser.add_argument("--soft-threshold", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--active-memory",
        default="",
        help="comma-separated recall modes (escalate, always): afterwards, ask each question as "
        "an owner turn in which the model calls no tool, and count the facts Active Memory put "
        "in front of it",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)
    args.active_memory = [m.strip() for m in args.active_memory.split(",") if m.strip()]
    if not 1 <= args.facts <= len(FACTS):
        parser.error(f"--facts must be between 1 and {len(FACTS)}")
    providers = [p.strip() for p in args.embedding.split(",") if p.strip()]
    unknown = [p for p in providers if p not in ("use", "none", "local")]
    if unknown:
        parser.error(f"unknown embedding provider(s): {', '.join(unknown)}; use use, none, local")

    results: list[Result] = []
    for provider in providers:
        log(f"Running {args.turns} turns with embedding {provider} …")
        with tempfile.TemporaryDirectory(prefix=f"pinch-survival-{provider}-") as tmp:
            try:
                results.append(asyncio.run(run_once(provider, args, Path(tmp))))
            except (
                Exception
            ) as exc:  # one provider failing (a missing model) must not hide the rest
                log(f"  [{provider}] failed: {type(exc).__name__}: {exc}")
                results.append({"embedding": provider, "error": f"{type(exc).__name__}: {exc}"})

    if args.json:
        settings = {k: v for k, v in vars(args).items() if k not in ("json", "embedding")}
        print(json.dumps({"settings": settings, "runs": results}, indent=2, ensure_ascii=False))
        return
    console = Console()
    console.print(summary_table(results))
    for r in results:
        for am in r.get("active_memory", []):
            console.print(
                f"[{r['embedding']}] Active Memory alone, recall_mode {am['mode']}: found "
                f"{am['found']}/{r['facts']} = {am['found_share']:.0%}; deep recall {am['deep']}"
            )
    for r in results:
        if r.get("misses"):
            console.print(misses_table(r))


if __name__ == "__main__":
    main()
