"""Does a message ask about the past? The trigger for deep recall, English and Chinese, no model.

    recall_intent("What did we decide about the trip?")     # RecallIntent(True, "memory phrase")
    recall_intent("上次我们去哪家餐厅吃的？")  # RecallIntent(True, "memory phrase")
    recall_intent("Can you write a haiku about rain?")      # RecallIntent(False, …)

Three ways to say yes, checked in order:
1. a memory phrase anywhere ("remember when", "last time", "what did we decide", "you told me",
   "上次", "之前", "还记得", "说过" …);
2. a question in the past ("When did…", "Where was…", "Did Anna…", "…去了哪里？");
3. a question about a named person or their things ("What is Anna's favourite book?",
   "How does Gina stay confident?"), or about the owner's own facts ("What's my locker code?",
   "我的护照号码是多少？") — what an assistant that remembers is asked most.
A question asking for advice or action ("should I…", "can you…", "what if…", "你觉得…",
"怎么办") is not recall unless it has a memory phrase. Measured in bench/recall.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memory.text import CJK_CHAR


@dataclass(frozen=True)
class RecallIntent:
    asks_about_past: bool
    reason: str  # what decided it, for /status and the benchmark

    def __bool__(self) -> bool:
        return self.asks_about_past


_I = re.IGNORECASE

# 1. Memory phrases: on their own they mean "look back".
_EN_MEMORY = re.compile(
    r"\b(?:"
    r"(?:do|did|can|could|don'?t)\s+you\s+(?:still\s+)?(?:remember|recall)"
    r"|remind\s+me\s+(?:what|when|where|who|how|which|of|about)"
    r"|what\s+did\s+(?:we|i|you)\s+(?:decide|say|agree|discuss|talk|plan|pick|choose|settle"
    r"|conclude|end\s+up|find)"
    r"|(?:you|i)\s+told\s+(?:me|you)"
    r"|did\s+(?:i|we|you)\s+(?:ever\s+)?(?:tell|mention|say|decide|agree|talk)"
    r"|what\s+was\s+(?:that|the\s+name)"
    r")\b",
    _I,
)
# Looking back, but only when asked ("Last time I drew a puppy…" is a story, not a question).
_EN_BACK = re.compile(
    r"\b(?:remember\s+(?:when|the\s+time|that\s+time|the\s+name)|last\s+time|the\s+other\s+day|back\s+(?:then|when)|a\s+while\s+(?:ago|back)"
    r"|earlier|previously|ago|before"
    r"|(?:we|i|you)\s+(?:decided|agreed|discussed|talked\s+about|mentioned|settled\s+on"
    r"|promised|planned)"
    r"|(?:last|past)\s+(?:week|month|year|summer|winter|spring|autumn|fall|weekend|night"
    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday))\b",
    _I,
)
_ZH_MEMORY = re.compile(
    r"你(?:还)?记(?:得|不记得)|还记不记得|记不记得|提醒我|我们(?:是)?怎么决定|我们决定(?:了)?(?:什么|哪|要)"
    r"|决定的是什么|(?:我|你)(?:之前|以前|上次)?(?:说|告诉|提)过(?:你|我)?.*[吗呢？?]"
    r"|(?:什么|谁|哪)来着|我(?:跟|和)你说过"
)
_ZH_BACK = re.compile(
    r"上次|上回|上一次|之前|以前|先前|那次|那时候|当时|记得|去年|上周|上星期|上个月|上个星期"
    r"|前几天|前天|昨天|最近|说过|提过|聊过|谈过|答应过|约好"
)
_ZH_FIRST_SECOND_PERSON = re.compile(r"我|你|您|咱")
_ZH_WH = re.compile(r"什么(?![都也])|谁|哪|几|多少|多久|怎么|为什么|为何|如何")
_ZH_OWN_FACT = re.compile(
    r"(?:我|我们|咱们)的[^，。！？?]{0,12}(?:是什么|叫什么|是谁|是多少|在哪|是哪|几点|几号|哪天"
    r"|什么时候)"
    # "我健身房储物柜的密码是多少？", "我对什么过敏？", "我最喜欢哪家餐厅？": the owner (not
    # wanting, able or about to do something), a question word (not 为什么/怎么, which ask for
    # reasons and ways), a question mark, no 吗/呢, not ending on a movement still to come (去/来)
    r"|(?:我|咱)(?!们?(?:要|可以|该|会|能|想|还))[^，。！？?可该能猜]{0,12}?"
    r"(?:(?<!为)什么(?![都也])|哪|几(?:点|号|月|年|岁)|多少|谁(?!都))[^，。！？?吗呢]{0,6}"
    r"(?<![去来走])[？?]"
)
_ZH_HABIT = re.compile(r"(?:为什么|为何).*(?:总是|老是|总|一直)")

# 2–3. Questions.
_EN_WH = re.compile(
    r"^\W*(?:so|and|but|hey|ok|okay|oh|um)?\W*(?:(?:until|till|since|by|from|on|at|in|for|to)\s+)?"
    r"(when|what|where|who|whom|whose|which|how|why|did|was|were|had|has|have|is|are|does|do|would|could)\b",
    _I,
)
_EN_PAST = re.compile(
    r"\b(?:did|was|were|had|has\s+\w+\s+(?:been|ever)|have\s+\w+\s+(?:been|ever)|used\s+to"
    r"|how\s+long\s+(?:has|have|had|did)|how\s+many\s+times|first\s+time|recently|ago)\b",
    _I,
)
_EN_ADVICE = re.compile(
    r"\b(?:should|shall)\s+(?:i|we)\b|\b(?:can|could|will|would)\s+you\b|\bcan\s+(?:i|we)\b"
    r"|\bwhat\s+if\b|\bdo\s+you\s+(?:think|know|have|like)\b|\bany\s+(?:suggestions?|ideas?|advice"
    r"|tips?)\b|\bhow\s+(?:do|can|should)\s+i\b|\bhelp\s+me\b|\bwhat\s+should\b"
    r"|\b(?:i'?m|we'?re|am\s+i|are\s+we)\s+going\s+to\b"
    r"|\bwill\s+(?:i|we|it|he|she|they|mom|dad)\b|\bdid\s+you\s+know\b",
    _I,
)
# Capitalised words that are not people: the pronoun I, family words, days, months, holidays.
_NOT_NAMES = frozenset(
    """
    I I'm I'll I've I'd Mom Mum Dad Mommy Daddy Mama Papa Grandma Grandpa Granny Grandmother
    Grandfather Auntie Aunt Uncle Teacher Sir Madam Monday Tuesday Wednesday Thursday Friday
    Saturday Sunday January February March April May June July August September October
    November December Christmas Easter Halloween Thanksgiving New Year Year's Eve Day OK Okay
    God English Chinese Math Maths TV
    """.split()  # noqa: SIM905
)
# "What's my locker code?", "Who is our plumber?", "Which medicine am I allergic to?"
_EN_OWN_FACT_START = re.compile(
    r"^\W*(?:(?:until|till|since|by|from|on|at|in|for|to)\s+)?"
    r"(?:what|when|where|who|which|how\s+(?:much|many|old|long|does|do|is|are))\b",
    _I,
)
_EN_OWN_FACT = re.compile(
    _EN_OWN_FACT_START.pattern + r".*"
    r"(?:\b(?:my|our)\s+\w+|\bam\s+i\b|\bdo\s+(?:i|we)\s+(?:have|own|keep|take|use|like"
    r"|prefer|pay|owe))",
    _I,
)
# …and, in a sentence that ends with "?", the owner as the one who does or undergoes something:
# "…where I stash things while working out?", "Which antibiotic gives me a bad reaction?"
_EN_OWN_FIRST_PERSON = re.compile(
    r"\b(?:i|we)\s+(?!should\b|shall\b|can\b|could\b|will\b|would\b|going\b|need\s+to\b)"
    r"[a-z]+|\b(?:me|us)\b|\b(?:i'?m|we'?re)\s+(?!going\b)[a-z]+",
    _I,
)
_CAPITALISED = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z]+(?:'s)?)\b")
_ZH_QUESTION = re.compile(r"[？?]|[吗呢嘛]\s*$|什么|哪|谁|几|多少|多久|怎么|为什么|为何")
_ZH_PAST = re.compile(r"了|过|曾经|曾|已经|那天|当初")
_SENTENCES = re.compile(r"(?<=[.!?。！？])\s*")
_ZH_ADVICE = re.compile(
    r"你觉得|你猜|你认为|怎么办|该怎么|应该|可以.*吗|能不能|可不可以|要不要|会不会|建议|帮我|给我|我想"
    r"|如果|我能|能.*吗|是什么东西"
)


def recall_intent(message: str) -> RecallIntent:
    """Whether `message` asks about something in the past (see the module docstring). Each
    sentence is judged on its own: a story followed by an unrelated question is not recall."""
    text = " ".join(message.split())
    if not text:
        return RecallIntent(False, "empty")
    cjk = CJK_CHAR.search(text) and len(CJK_CHAR.findall(text)) * 2 >= len(text.replace(" ", ""))
    judge = _chinese if cjk else _english
    verdicts = [judge(s) for s in _SENTENCES.split(text) if s.strip()]
    return next(
        (v for v in verdicts if v), verdicts[-1] if verdicts else RecallIntent(False, "empty")
    )


def _english(text: str) -> RecallIntent:
    if _EN_MEMORY.search(text):
        return RecallIntent(True, "memory phrase")
    question = text.rstrip().endswith("?") or _EN_WH.match(text) is not None
    if not question:
        return RecallIntent(False, "not a question")
    if _EN_BACK.search(text):
        return RecallIntent(True, "question looking back")
    if _EN_ADVICE.search(text):
        return RecallIntent(False, "asks for advice or action")
    if _EN_PAST.search(text):
        return RecallIntent(True, "question about the past")
    if _EN_OWN_FACT.search(text) or (
        text.rstrip().endswith("?")
        and _EN_OWN_FACT_START.match(text)
        and _EN_OWN_FIRST_PERSON.search(text)
    ):
        return RecallIntent(True, "question about the owner's own facts")
    # A possessive names someone even when it is a family word ("Mum's favourite cake").
    names = [
        w
        for w in _CAPITALISED.findall(text)
        if w.endswith("'s") or w.removesuffix("'s") not in _NOT_NAMES
    ]
    if names:
        return RecallIntent(True, "question about a named person")
    return RecallIntent(False, "question about the present")


def _chinese(text: str) -> RecallIntent:
    if _ZH_MEMORY.search(text):
        return RecallIntent(True, "memory phrase")
    if not _ZH_QUESTION.search(text):
        return RecallIntent(False, "not a question")
    if _ZH_BACK.search(text):
        return RecallIntent(True, "question looking back")
    if _ZH_ADVICE.search(text):
        return RecallIntent(False, "asks for advice or action")
    someone_else = _ZH_WH.search(text) and not _ZH_FIRST_SECOND_PERSON.search(text)
    if someone_else and not _ZH_HABIT.search(text):
        return RecallIntent(True, "question about someone else")
    if _ZH_OWN_FACT.search(text):
        return RecallIntent(True, "question about the owner's own facts")
    if "我们" in text and _ZH_PAST.search(text):
        return RecallIntent(True, "question about the past")
    return RecallIntent(False, "question about the present")
