"""Deterministic, realistic-looking memory text for speed benchmarks: English with some Chinese.

Everything is drawn from a seeded `random.Random`, so a given seed always yields the same bytes
(and therefore the same chunk hashes, which keeps the embedding cache warm between runs).

Two vocabularies. The small one (the default; the chat log of the indexing-throughput scenario)
has ~80 content words, so at 100k chunks every query word would sit in 5–30 % of all chunks —
far denser than real notes, and it makes FTS5 rank tens of thousands of rows per query. The rich
one (`TextSource(seed, rich=True)`, used for the 1k/10k/100k search-latency corpora) draws people,
places, projects, foods and things from a few thousand names built from word lists, each with
Zipf-like weights (a few close people and places come up all the time, most rarely), so
a query word's document frequency spreads the way it does in a real journal.
"""

from __future__ import annotations

import random
from datetime import date, timedelta

PEOPLE = ["Anna", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas"]
PLACES = ["Lisbon", "the office", "the gym", "Kyoto", "the dentist", "Grandma's house", "Berlin"]
PROJECTS = [
    "the garden shed",
    "the tax return",
    "the Rust rewrite",
    "the kitchen renovation",
    "the quarterly report",
    "the wedding toast",
    "the half marathon",
    "the photo album",
]
FOODS = ["ramen", "lentil soup", "sourdough", "green curry", "tacos", "dumplings", "paella"]
THINGS = ["passport", "bike lock", "blue umbrella", "laptop charger", "library card", "car keys"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

ENGLISH = [
    "Booked {place} for {weekday} at {hour}:{minute:02d}; remind me to bring the {thing}.",
    "{person} said the deadline for {project} moved to {weekday}, so I should start early.",
    "We decided to cook {food} on {weekday} and invite {person} and {person2}.",
    "I left my {thing} at {place} again — next time put it in the front pocket.",
    "Spent {n} minutes on {project}; the hard part is done, only the details are left.",
    "{person} recommended a new place for {food} near {place}; worth trying soon.",
    "Paid {n} euros for {project} today, which is more than we planned.",
    "Note to self: {person}'s birthday is on the {n}th, and they like {food}.",
    "Ran {n} kilometres before work; my knee felt fine, unlike last week.",
    "Talked to {person} about {project}: they prefer to finish it before the holidays.",
    "The flight to {place} leaves at {hour}:{minute:02d} on {weekday}; check in the night before.",
    "Could not find the {thing} anywhere this morning, it was in the car the whole time.",
]
CHINESE = [
    "今天和{cperson}一起去{cplace}，吃了{cfood}，感觉很开心。",
    "提醒自己：{weekday_cn}下午{hour}点要给{cperson}打电话，讨论{cproject}的事情。",
    "{cperson}说{cproject}的截止日期推迟了，我们可以慢慢来。",
    "周末打算在家做{cfood}，顺便整理一下{cproject}的资料。",
    "跑步{n}公里，天气很好，路上遇到了{cperson}。",
]
CPEOPLE = ["小王", "李老师", "妈妈", "张伟", "陈静"]
CPLACES = ["公园", "超市", "图书馆", "火锅店", "海边"]
CFOODS = ["饺子", "火锅", "红烧肉", "小笼包", "牛肉面"]
CPROJECTS = ["装修", "年度报告", "搬家", "旅行计划", "婚礼"]
CWEEKDAYS = ["周一", "周二", "周三", "周四", "周五", "周六", "周日"]
REPLIES = [
    "Got it, I'll remember that.",
    "Noted. Do you want a reminder the day before?",
    "Sounds good — I added it to today's log.",
    "好的，我记下了。",
    "I'll keep that in mind for next time.",
]

QUESTIONS = [
    "When is {person}'s birthday?",
    "What did we decide about {project}?",
    "Where did I leave my {thing}?",
    "What time is the flight to {place}?",
    "Who recommended the {food} place?",
    "How much did {project} cost?",
    "{cperson}说{cproject}什么时候截止？",
    "上次在{cplace}吃了什么？",
]


FIRST_NAMES = [
    "Anna",
    "Ben",
    "Chloe",
    "Dev",
    "Elena",
    "Farid",
    "Grace",
    "Hiro",
    "Ines",
    "Jonas",
    "Karim",
    "Lena",
    "Marco",
    "Nadia",
    "Oskar",
    "Priya",
    "Quentin",
    "Rosa",
    "Sven",
    "Tara",
    "Umar",
    "Vera",
    "Wes",
    "Xenia",
    "Yusuf",
    "Zoe",
    "Aiko",
    "Bruno",
    "Carmen",
    "Dmitri",
    "Emil",
    "Fatima",
    "Goran",
    "Hana",
    "Ivan",
    "Julia",
    "Kenji",
    "Lars",
    "Mina",
    "Nils",
    "Olga",
    "Pablo",
    "Rhea",
    "Samir",
    "Tomas",
    "Ursula",
    "Viktor",
    "Wanda",
    "Yara",
    "Zane",
    "Amir",
    "Beatriz",
    "Colm",
    "Dalia",
    "Eitan",
    "Freya",
    "Gustav",
    "Helga",
    "Idris",
    "Jana",
    "Kofi",
    "Leila",
    "Mateo",
    "Noor",
    "Orla",
    "Pavel",
    "Rania",
    "Stefan",
    "Thea",
    "Ulrich",
    "Valentina",
    "Willem",
    "Yasmin",
    "Ziggy",
    "Agnes",
    "Bilal",
    "Cora",
    "Diego",
    "Esme",
]
SURNAMES = [
    "Novak",
    "Schmidt",
    "Tanaka",
    "Okafor",
    "Rossi",
    "Silva",
    "Haddad",
    "Kowalski",
    "Jensen",
    "Moreau",
    "Ivanova",
    "Park",
    "Nguyen",
    "Costa",
    "Berg",
    "Fischer",
    "Sato",
    "Mensah",
    "Ricci",
    "Duarte",
]
CITIES = [
    "Lisbon",
    "Kyoto",
    "Berlin",
    "Oslo",
    "Porto",
    "Lyon",
    "Seville",
    "Krakow",
    "Tallinn",
    "Ghent",
    "Bergen",
    "Nagoya",
    "Busan",
    "Hanoi",
    "Quito",
    "Cusco",
    "Tbilisi",
    "Yerevan",
    "Riga",
    "Vilnius",
    "Bruges",
    "Utrecht",
    "Aarhus",
    "Turku",
    "Bologna",
    "Split",
    "Sarajevo",
    "Plovdiv",
    "Izmir",
    "Tangier",
    "Accra",
    "Nairobi",
    "Mombasa",
    "Durban",
    "Perth",
    "Hobart",
    "Nelson",
    "Halifax",
    "Quebec",
    "Boise",
]
VENUES = [
    "bakery",
    "library",
    "clinic",
    "gym",
    "pool",
    "market",
    "studio",
    "garage",
    "cafe",
    "bistro",
    "museum",
    "park",
    "harbour",
    "station",
    "dentist",
    "barber",
    "florist",
    "hardware-store",
    "bookshop",
    "cinema",
]
PROJECT_OWNERS = [
    "garden",
    "kitchen",
    "attic",
    "garage",
    "balcony",
    "bathroom",
    "basement",
    "hallway",
    "office",
    "nursery",
    "cellar",
    "porch",
]
PROJECT_WORKS = [
    "shed",
    "renovation",
    "shelves",
    "paint-job",
    "flooring",
    "lighting",
    "insulation",
    "plumbing",
    "wiring",
    "tiling",
    "curtains",
]
TASKS = [
    "tax-return",
    "grant-application",
    "thesis-chapter",
    "quarterly-report",
    "wedding-toast",
    "photo-album",
    "half-marathon",
    "visa-renewal",
    "insurance-claim",
    "job-application",
    "conference-talk",
    "novel-draft",
    "podcast-episode",
    "board-game",
    "lease-renewal",
    "pension-forms",
]
FOOD_WORDS = [
    "ramen",
    "lentil-soup",
    "sourdough",
    "green-curry",
    "tacos",
    "dumplings",
    "paella",
    "risotto",
    "falafel",
    "pho",
    "bibimbap",
    "moussaka",
    "ceviche",
    "goulash",
    "shakshuka",
    "laksa",
    "pierogi",
    "tagine",
    "gnocchi",
    "borscht",
    "jollof",
    "injera",
    "arepas",
    "katsu",
]
OBJECTS = [
    "passport",
    "bike-lock",
    "umbrella",
    "laptop-charger",
    "library-card",
    "car-keys",
    "headphones",
    "tripod",
    "thermos",
    "yoga-mat",
    "sunglasses",
    "wallet",
    "drill",
    "stapler",
    "kettle",
    "backpack",
    "raincoat",
    "harmonica",
    "telescope",
    "sketchbook",
]
COLOURS = ["blue", "red", "green", "black", "grey", "yellow", "old", "new", "spare", "small"]


def _zipf_weights(n: int) -> list[float]:
    return [1.0 / (rank + 1) for rank in range(n)]


class _Vocabulary:
    """Names with Zipf-like weights, built once per seed so every run draws the same ones."""

    def __init__(self, rng: random.Random) -> None:
        def shuffled(items: list[str]) -> list[str]:
            out = list(items)
            rng.shuffle(out)
            return out

        words = lambda xs: [x.replace("-", " ") for x in xs]  # noqa: E731
        self.people = shuffled([f"{f} {s}" for f in FIRST_NAMES for s in SURNAMES][:1600])
        self.people = [p.split()[0] if i < 60 else p for i, p in enumerate(self.people)]
        self.places = shuffled([f"the {c} {v}" for c in CITIES for v in words(VENUES)] + CITIES)
        self.projects = shuffled(
            [f"the {o} {w}" for o in PROJECT_OWNERS for w in words(PROJECT_WORKS)]
            + [f"the {t}" for t in words(TASKS)]
        )
        self.foods = shuffled(words(FOOD_WORDS))
        self.things = shuffled([f"{c} {o}" for c in COLOURS for o in words(OBJECTS)])
        self.weights = {
            name: _zipf_weights(len(getattr(self, name)))
            for name in ("people", "places", "projects", "foods", "things")
        }

    def pick(self, rng: random.Random, kind: str) -> str:
        return rng.choices(getattr(self, kind), weights=self.weights[kind])[0]


class TextSource:
    """Sentences, dialogue and questions drawn from a seeded generator; `rich` selects the
    large vocabulary (see the module docstring)."""

    def __init__(self, seed: int, *, rich: bool = False) -> None:
        self.rng = random.Random(seed)
        self.vocabulary = _Vocabulary(random.Random(1)) if rich else None

    def _slots(self) -> dict[str, object]:
        r = self.rng
        v = self.vocabulary
        person, person2 = r.sample(PEOPLE, 2)
        if v is not None:
            person, person2 = v.pick(r, "people"), v.pick(r, "people")
        return {
            "person": person,
            "person2": person2,
            "place": v.pick(r, "places") if v else r.choice(PLACES),
            "project": v.pick(r, "projects") if v else r.choice(PROJECTS),
            "food": v.pick(r, "foods") if v else r.choice(FOODS),
            "thing": v.pick(r, "things") if v else r.choice(THINGS),
            "weekday": r.choice(WEEKDAYS),
            "hour": r.randint(7, 21),
            "minute": r.choice([0, 15, 30, 45, 5, 50]),
            "n": r.randint(2, 28),
            "cperson": r.choice(CPEOPLE),
            "cplace": r.choice(CPLACES),
            "cfood": r.choice(CFOODS),
            "cproject": r.choice(CPROJECTS),
            "weekday_cn": r.choice(CWEEKDAYS),
        }

    def sentence(self, chinese_share: float = 0.15) -> str:
        templates = CHINESE if self.rng.random() < chinese_share else ENGLISH
        return self.rng.choice(templates).format(**self._slots())

    def question(self) -> str:
        return self.rng.choice(QUESTIONS).format(**self._slots())

    def reply(self) -> str:
        return self.rng.choice(REPLIES)


def conversation_log(size_bytes: int, seed: int = 7) -> str:
    """A chat log of owner/assistant turns under session headings, at most `size_bytes` of UTF-8
    and within one line of it."""
    source = TextSource(seed)
    lines: list[str] = []
    size = 0
    day = date(2024, 3, 1)
    session = 0
    while True:
        if not lines or source.rng.random() < 0.04:
            session += 1
            day += timedelta(days=source.rng.randint(0, 2))
            hour = source.rng.randint(7, 22)
            block = [] if not lines else [""]
            block.append(f"## Session {session} — {day.isoformat()} {hour:02d}:00")
        else:
            minute = source.rng.randint(0, 59)
            if source.rng.random() < 0.6:
                text = " ".join(source.sentence() for _ in range(source.rng.randint(1, 3)))
                block = [f"- {minute:02d} Owner: {text}"]
            else:
                block = [f"- {minute:02d} Assistant: {source.reply()}"]
        added = sum(len(line.encode("utf-8")) + 1 for line in block)
        if size + added > size_bytes:
            return "\n".join(lines) + "\n"
        lines += block
        size += added


def daily_note(source: TextSource, day: date, sections: int) -> str:
    """One day's log: a title, then `sections` timed sections of a few bullet points."""
    lines = [f"# {day.isoformat()}"]
    for _ in range(sections):
        hour, minute = source.rng.randint(7, 22), source.rng.randint(0, 59)
        lines += ["", f"## {hour:02d}:{minute:02d}"]
        lines += [f"- {source.sentence()}" for _ in range(source.rng.randint(2, 6))]
    return "\n".join(lines) + "\n"
