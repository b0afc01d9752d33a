"""A small multi-session set of reworded questions, LongMemEval-style, in LoCoMo's JSON shape.

    .venv/bin/python bench/reworded_sessions.py bench/out/reworded_sessions.json
    .venv/bin/python bench/retrieval.py --locomo bench/out/reworded_sessions.json --no-madial

Why: bench/compaction_survival.py's paraphrases are one data set of reworded questions; a
ranking rule for them needs a second one (issue 20: "a change is adopted only if it helps on at
least two data sets"). The public LongMemEval data is not in shared/, so this is a small set in
its shape, written by hand before any ranking change was measured on it: a person ("Sam")
talks with an assistant over many dated sessions; now and then Sam says a fact about their life
once, among chit-chat; later questions ask about it **in other words** — no content word
(Porter-stemmed, stopwords aside) in common with the evidence turn(s), checked at generation
(`check_reworded` refuses otherwise). Two kinds, as in LongMemEval:

- single-session (category 4, "single-hop"): one fact, one evidence turn;
- multi-session (category 1, "multi-hop"): two facts in different sessions (a plan and its
  later update or outcome); both turns are the evidence (located_all@10 needs both).

Format (what bench/locomo.py reads): a JSON list of samples, each with `sample_id`,
`conversation` (`speaker_a`, `speaker_b`, `session_N` — a list of `{speaker, dia_id, text}`
turns, dia_id "D<session>:<turn>" — and `session_N_date_time`, "10:00 am on 3 March, 2025"),
and `qa` (a list of `{question, answer, evidence: [dia_id, ...], category}`). Deterministic: the
same seed writes the same file. Filler turns come from fixed pools of everyday chat (Sam's small
talk and requests, the assistant's answers), shuffled per session by the seed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from bench.compaction_survival import shared_terms

SESSIONS = 12  # per conversation
FILLER_PAIRS = 7  # Sam / assistant exchanges of chit-chat per session, besides the facts


@dataclass(frozen=True)
class Single:
    fact: str
    question: str
    answer: str


@dataclass(frozen=True)
class Double:
    first: str  # said in an earlier session
    second: str  # its update or outcome, in a later one
    question: str
    answer: str


SINGLES: tuple[Single, ...] = (
    Single(
        "My dentist appointment is on the 14th at 9:30",
        "When do I need to get my teeth checked?",
        "the 14th at 9:30",
    ),
    Single(
        "I finally switched my phone plan to Vodafone, 20 pounds a month",
        "Which mobile carrier do I pay now?",
        "Vodafone",
    ),
    Single(
        "Our wifi password is otter-lamp-92",
        "What do I type to get the laptop online at home?",
        "otter-lamp-92",
    ),
    Single(
        "My sister Hannah just had a baby boy called Felix",
        "What's the name of my new nephew?",
        "Felix",
    ),
    Single(
        "I'm allergic to penicillin, found out the hard way",
        "Which antibiotic must doctors never give me?",
        "penicillin",
    ),
    Single(
        "The car is booked in for its MOT on Friday", "When is the vehicle inspection?", "Friday"
    ),
    Single(
        "I keep the spare house key under the blue flowerpot by the back door",
        "Where did I hide a way in, in case I get locked out?",
        "under the blue flowerpot by the back door",
    ),
    Single(
        "My manager Priya wants the quarterly report by the 30th",
        "When is my boss expecting the three-month summary?",
        "by the 30th",
    ),
    Single(
        "We adopted a grey cat from the shelter and named her Pebble",
        "What did we call the kitten we took in?",
        "Pebble",
    ),
    Single(
        "I run 5k every Tuesday and Thursday morning",
        "Which days do I go jogging?",
        "Tuesday and Thursday",
    ),
    Single("My blood type is O negative", "Which group do I belong to for transfusions?", "O-"),
    Single(
        "I'm learning Portuguese because we're visiting Lisbon in June",
        "Which language am I studying for the summer trip?",
        "Portuguese",
    ),
    Single(
        "The plumber said the boiler needs a new pressure valve",
        "What part must be replaced on the heating system?",
        "a pressure valve",
    ),
    Single(
        "My favourite restaurant is that little Ethiopian place on Mill Street",
        "Where do I most like to eat out?",
        "the Ethiopian place on Mill Street",
    ),
    Single(
        "I donated my old bike to the community workshop",
        "What happened to the bicycle I no longer used?",
        "donated to the community workshop",
    ),
    Single(
        "My gym membership renews automatically on 1 August",
        "When will the fitness club charge me again?",
        "1 August",
    ),
    Single(
        "Tom's wedding is in Cornwall on the 22nd of September",
        "Where is my friend getting married?",
        "Cornwall",
    ),
    Single(
        "I switched to decaf after 2pm because I wasn't sleeping well",
        "Why did I cut caffeine in the afternoon?",
        "poor sleep",
    ),
    Single(
        "My daughter's school shoe size is 13", "How big are my girl's feet for footwear?", "13"
    ),
    Single(
        "The landlord is raising the rent by 80 pounds from March",
        "How much more will housing cost us soon?",
        "80 pounds more from March",
    ),
    Single(
        "I left my umbrella at Jake's flat",
        "Where did I forget the thing that keeps rain off?",
        "at Jake's flat",
    ),
    Single("My pension provider is Aviva", "Which company holds my retirement savings?", "Aviva"),
    Single(
        "I'm reading a biography of Ada Lovelace at the moment",
        "Which book about a computing pioneer have I got on the go?",
        "a biography of Ada Lovelace",
    ),
    Single(
        "We planted tomatoes and courgettes in the raised beds",
        "What vegetables are growing in the garden?",
        "tomatoes and courgettes",
    ),
    Single(
        "The spare room is being turned into my home office",
        "What will the extra bedroom become?",
        "a home office",
    ),
    Single(
        "I broke my left wrist skiing in 2019",
        "Which bone did I fracture on the slopes years ago?",
        "left wrist",
    ),
    Single("My library card number is 40021873", "What digits let me borrow books?", "40021873"),
    Single(
        "I've been invited to give a talk at the Python meetup in November",
        "When am I presenting to the programming group?",
        "November",
    ),
    Single(
        "Dad's surgery went well and he's home recovering",
        "How did my father's operation go?",
        "well; he is recovering at home",
    ),
    Single(
        "We're saving for a deposit on a flat in Bristol",
        "What are we putting money aside for?",
        "a deposit on a flat in Bristol",
    ),
    Single(
        "I can't eat gluten, coeliac since I was a kid",
        "Which ingredient does my diet exclude?",
        "gluten",
    ),
    Single("My laptop is a ThinkPad X1 from 2021", "What computer do I work on?", "ThinkPad X1"),
    Single(
        "The neighbours' dog is called Biscuit and barks at the postman",
        "What's the name of the pet next door?",
        "Biscuit",
    ),
    Single(
        "I passed my driving test on the second attempt",
        "How many tries did it take me to get my licence?",
        "two",
    ),
    Single(
        "Our anniversary is the 9th of May",
        "Which date did my partner and I get together?",
        "9 May",
    ),
    Single(
        "I volunteer at the food bank on Saturday afternoons",
        "When do I help out with charity?",
        "Saturday afternoons",
    ),
    Single(
        "My flight to Toronto leaves at 7:15 from Gatwick",
        "What time is the plane to Canada?",
        "7:15",
    ),
    Single(
        "I'm trying to cut down to one glass of wine a week",
        "How much alcohol am I allowing myself?",
        "one glass a week",
    ),
    Single(
        "The printer ink I need is the HP 305 cartridge",
        "Which refill does the machine that puts documents on paper take?",
        "HP 305",
    ),
    Single(
        "My therapist sessions are every other Wednesday",
        "How often do I see the counsellor?",
        "every other Wednesday",
    ),
)

DOUBLES: tuple[Double, ...] = (
    Double(
        "We're moving house to Leeds in the spring",
        "The move got pushed back to October because of the survey",
        "When are we relocating now?",
        "October",
    ),
    Double(
        "I started guitar lessons with a teacher called Marco",
        "Marco says I'm ready for my first recital",
        "How is my instrument tuition progressing?",
        "ready for a first recital",
    ),
    Double(
        "My brother Leo lives in Melbourne",
        "Leo is flying over for Christmas",
        "Who is travelling from Australia for the holidays?",
        "Leo",
    ),
    Double(
        "I applied for the data analyst job at the council",
        "I got the council job, starting in two weeks",
        "Did my application for a new position succeed?",
        "yes, the council job",
    ),
    Double(
        "I'm training for a half marathon",
        "I finished the half marathon in 1 hour 58",
        "How did the race I prepared for turn out?",
        "1 hour 58",
    ),
    Double(
        "My mum has been having trouble with her knee",
        "Mum's knee replacement is scheduled for May",
        "What's happening with my mother's leg joint?",
        "a replacement in May",
    ),
    Double(
        "We bought a second-hand Skoda",
        "The Skoda's gearbox failed",
        "What went wrong with the used vehicle we purchased?",
        "the gearbox failed",
    ),
    Double(
        "I signed up for a pottery class on Mondays",
        "I made a wonky bowl at pottery",
        "What did I create in my ceramics course?",
        "a wonky bowl",
    ),
    Double(
        "Our daughter Ruby is starting nursery",
        "Ruby cried at nursery drop-off all week",
        "How has our little one settled into childcare?",
        "she cried at drop-off all week",
    ),
    Double(
        "I'm reading about solar panels for the roof",
        "The solar panels are installed, 12 of them",
        "How many sun-powered units went up on the house?",
        "12",
    ),
)

USER_FILLER = (
    "Morning! Slow start today, the coffee machine is acting up again.",
    "Can you suggest something quick for dinner with rice and spinach?",
    "I watched a documentary about octopuses last night, they're so clever.",
    "What's a polite way to decline a meeting invite?",
    "The weather has been miserable all week, grey and drizzly.",
    "Any tips for keeping houseplants alive in winter?",
    "I need a birthday card message for a colleague I barely know.",
    "How long should I boil an egg for a runny yolk?",
    "Remind me what the difference between affect and effect is.",
    "I spent the whole afternoon tidying the garage.",
    "Can you help me write a short email asking for an extension?",
    "Traffic was terrible this morning, took an hour to get in.",
    "What are some good podcasts about history?",
    "I'm thinking about reorganising my bookshelf by colour.",
    "Is it worth buying an air fryer?",
    "We had friends over for board games, it went late.",
    "How do I get a red wine stain out of a carpet?",
    "Give me three ideas for a rainy Sunday.",
    "My neighbour keeps parking across our drive, how do I raise it nicely?",
    "I tried a new recipe for lentil soup and it was bland.",
    "What's a good stretch for a stiff neck?",
    "Could you explain compound interest in simple terms?",
    "I can't decide between a paper planner and an app.",
    "The kids were up early so I'm exhausted.",
    "What's the best way to learn to touch type?",
    "I found an old photo album in the loft yesterday.",
    "Write me a two-line poem about autumn leaves.",
    "How do I stop procrastinating on boring tasks?",
    "Our street had a power cut for three hours.",
    "What should I pack for a weekend camping trip?",
    "I keep forgetting to drink water during the day.",
    "Tell me a fun fact about bees.",
    "Can you summarise the plot of Pride and Prejudice in a few lines?",
    "I'm bored of my usual lunch, any new ideas?",
    "The washing machine is making a weird noise on spin.",
    "Recommend a film for a family night in.",
    "How do I make my emails sound less blunt?",
    "What's the difference between baking soda and baking powder?",
    "I did a big supermarket shop and spent way too much.",
    "Help me plan a simple weekly cleaning routine.",
    "What time zone is Tokyo in compared to here?",
    "I started a jigsaw puzzle, a thousand pieces of sky.",
)

ASSISTANT_FILLER = (
    "That sounds frustrating. A descaling cycle often helps, and running plain water through it "
    "once a week keeps it from clogging again.",
    "Try a quick spinach and garlic fried rice: soften garlic in oil, add cooked rice, stir in the "
    "spinach until it wilts, finish with soy sauce and a fried egg on top.",
    "They really are remarkable. Octopuses can solve puzzles, open jars and even recognise "
    "individual people, with most of their neurons in their arms.",
    "You could say: thank you for the invite, unfortunately I can't make it, but please share the "
    "notes and I'll follow up on anything that needs me.",
    "Grey weeks are hard. A short walk at midday, when the light is brightest, can lift your mood "
    "more than you would expect.",
    "Water less often, keep them away from radiators, wipe the leaves so they catch more light, "
    "and hold off on feeding until spring.",
    "Something like: wishing you a wonderful birthday and a great year ahead — enjoy the day!",
    "About six minutes in boiling water for a runny yolk, then straight into cold water so it "
    "stops cooking.",
    "Affect is usually the verb (the rain affected the match) and effect the noun (the rain had "
    "an effect on the match).",
    "That's a satisfying job to finish. A labelled shelf for tools usually keeps it tidy longer.",
    "Of course. Keep it short: state the task, the new date you propose, one line on why, and "
    "thank them for considering it.",
    "An hour is draining. If your hours allow it, leaving fifteen minutes earlier often avoids the "
    "worst of it.",
    "You might enjoy The Rest Is History, Fall of Civilizations and In Our Time; each takes a "
    "different pace.",
    "A colour-sorted shelf looks striking, though it makes finding a particular title harder; "
    "some people keep a small section by author for reference books.",
    "If you cook a lot of small portions, an air fryer saves time and energy; for big family "
    "meals the oven is still more practical.",
    "Late game nights are the best kind. Hope the competition stayed friendly!",
    "Blot it, don't rub, then dab with a mix of washing-up liquid and warm water; a little white "
    "vinegar helps with what is left.",
    "A film marathon with blankets, a baking session, or a board game afternoon with snacks.",
    "A friendly word works best: mention that you sometimes need to get out early and ask if they "
    "could leave the entrance clear.",
    "Lentils need bold seasoning: cumin, smoked paprika, plenty of salt and a squeeze of lemon at "
    "the end brighten it a lot.",
    "Try gently tilting your ear toward your shoulder for thirty seconds each side, and slow "
    "shoulder rolls.",
    "Compound interest means you earn interest on your interest too, so savings grow faster the "
    "longer you leave them alone.",
    "A planner helps if writing things down makes them stick; an app wins if you need reminders.",
    "Early mornings with little ones are tiring. An early night tonight might help you catch up.",
    "Use a free typing tutor for ten minutes a day and don't look at the keys; speed comes after "
    "accuracy.",
    "Old albums are lovely to find. Scanning a few favourites keeps them safe from damp.",
    "Amber leaves let go of the branch, / drifting down like slow applause.",
    "Break the task into a five-minute first step and start a timer; starting is the hardest part.",
    "Three hours is a long time without power. Worth keeping a torch and a charged power bank "
    "somewhere easy to find.",
    "A tent, sleeping bag and mat, warm layers, a head torch, a stove with fuel, water and easy "
    "meals, plus a small first-aid kit.",
    "A bottle on your desk and a glass with every meal make it much easier to keep track.",
    "Bees communicate where flowers are through a waggle dance that encodes direction and "
    "distance.",
    "Elizabeth Bennet and Mr Darcy misjudge each other through pride and prejudice, then slowly "
    "learn better and marry.",
    "Try a grain bowl, a wrap with hummus and roasted vegetables, or a big soup you can batch on "
    "Sunday.",
    "A loud noise on spin is often an unbalanced load or something caught in the drum; check the "
    "filter too.",
    "Paddington 2 is a safe bet for all ages, warm and genuinely funny.",
    "Open with a friendly line, use 'could we' instead of 'you need to', and end with thanks.",
    "Baking soda needs an acid to react; baking powder already contains one, so it works alone.",
    "A shopping list and a quick look at the cupboards first can cut the total noticeably.",
    "Spread it out: ten minutes of kitchen and surfaces daily, bathrooms twice a week, floors and "
    "bedding at the weekend.",
    "Tokyo is nine hours ahead of UK winter time and eight ahead in summer.",
    "A sky puzzle is a real test of patience! Sorting by tiny shade differences helps.",
)

ACKS = (
    "Thanks for telling me, I'll keep that in mind.",
    "Got it.",
    "Noted — good to know.",
    "Okay, I'll remember that.",
    "Understood, thanks.",
)


def check_reworded() -> None:
    """Refuse a question that shares a content word with its evidence turn(s)."""
    bad = [(s.fact, s.question) for s in SINGLES if shared_terms(s.fact, s.question)]
    bad += [
        (d.first + " / " + d.second, d.question)
        for d in DOUBLES
        if shared_terms(d.first, d.question) or shared_terms(d.second, d.question)
    ]
    if bad:
        raise SystemExit("questions sharing a word with their fact: " + repr(bad))


def build(seed: int = 11, conversations: int = 2) -> list[dict[str, object]]:
    """The set: `conversations` samples, the facts dealt out between them in order."""
    rng = random.Random(seed)
    samples = []
    for c in range(conversations):
        singles = SINGLES[c::conversations]
        doubles = DOUBLES[c::conversations]
        # Which session each fact is said in: singles spread over all sessions; a double's two
        # halves at least three sessions apart.
        plan: dict[int, list[tuple[str, int]]] = {s: [] for s in range(1, SESSIONS + 1)}
        for i, single in enumerate(singles):
            plan[rng.randint(1, SESSIONS)].append((single.fact, i))
        for j, double in enumerate(doubles):
            first = rng.randint(1, SESSIONS - 4)
            second = rng.randint(first + 3, SESSIONS)
            plan[first].append((double.first, 1000 + 2 * j))
            plan[second].append((double.second, 1000 + 2 * j + 1))
        conversation: dict[str, object] = {"speaker_a": "Sam", "speaker_b": "Assistant"}
        where: dict[int, str] = {}
        start = datetime(2025, 1, 6, 9, 30) + timedelta(days=40 * c)
        for s in range(1, SESSIONS + 1):
            when = start + timedelta(days=9 * (s - 1), hours=rng.randint(0, 9))
            hour = when.hour % 12 or 12
            conversation[f"session_{s}_date_time"] = (
                f"{hour}:{when.minute:02d} {'am' if when.hour < 12 else 'pm'} on "
                f"{when.day} {when:%B}, {when.year}"
            )
            user = rng.sample(USER_FILLER, FILLER_PAIRS)
            assistant = rng.sample(ASSISTANT_FILLER, FILLER_PAIRS)
            pairs: list[tuple[str, str, int | None]] = [
                (u, a, None) for u, a in zip(user, assistant, strict=True)
            ]
            for text, key in plan[s]:
                pairs.insert(rng.randint(1, len(pairs)), (text, rng.choice(ACKS), key))
            turns = []
            for u, a, key in pairs:
                n = len(turns) + 1
                turns.append({"speaker": "Sam", "dia_id": f"D{s}:{n}", "text": u})
                turns.append({"speaker": "Assistant", "dia_id": f"D{s}:{n + 1}", "text": a})
                if key is not None:
                    where[key] = f"D{s}:{n}"
            conversation[f"session_{s}"] = turns
        qa = [
            {"question": x.question, "answer": x.answer, "evidence": [where[i]], "category": 4}
            for i, x in enumerate(singles)
        ]
        qa += [
            {
                "question": x.question,
                "answer": x.answer,
                "evidence": [where[1000 + 2 * j], where[1000 + 2 * j + 1]],
                "category": 1,
            }
            for j, x in enumerate(doubles)
        ]
        samples.append({"sample_id": f"reworded-{c + 1}", "conversation": conversation, "qa": qa})
    return samples


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="where to write the JSON")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    check_reworded()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    data = build(args.seed)
    args.out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    questions = sum(len(s["qa"]) for s in data)  # type: ignore[arg-type]
    print(f"wrote {args.out}: {len(data)} conversations, {questions} questions")


if __name__ == "__main__":
    main()
