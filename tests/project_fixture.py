"""A small untagged workspace and its questions: the fixture for "with no project tags and no
active project, search is exactly what it was" (tests/test_projects_ranking.py)."""

from __future__ import annotations

FILES = {
    "MEMORY.md": (
        "# Memory\n\n"
        "- 2026-03-02: The kitchen budget is 18,000 euros, tiles included.\n"
        "- 2026-03-05: The contractor, Marek, starts on April 14th.\n"
        "- 2026-03-09: The Apollo database migration must finish before the June deadline.\n"
        "- 2026-03-11: The wedding venue deposit is due on May 1st; budget 25,000.\n"
        "- 2026-03-12: Anna is allergic to peanuts.\n"
    ),
    "USER.md": "# User\n\n- Prefers short answers.\n- 住在柏林，喜欢早上跑步。\n",
    "memory/2026-04-02.md": (
        "# 2026-04-02\n\n"
        "- Called the contractor about the bathroom tiles; he wants a decision by Friday.\n"
        "- Apollo: the database team moved the deadline to June 20th.\n"
        "- 婚礼预算增加了两千欧元，主要是花费在摄影上。\n"
    ),
    "memory/2026-05-10.md": (
        "# 2026-05-10\n\n"
        "We agreed with the caterer on the wedding menu. The budget stays the same.\n\n"
        "The database index rebuild for Apollo took four hours; next time run it at night.\n"
    ),
}

QUERIES = [
    "what did we decide about the budget?",
    "when does the contractor start",
    "database deadline",
    "婚礼预算",
    "peanuts allergy",
]

# What main's search returned for QUERIES before projects existed (USE embeddings,
# now = 2026-06-01): preset|query → [path, start, end, score rounded to 9 places].
GOLD: dict[str, list[tuple[str, int, int, float]]] = {
    "pinch|what did we decide about the budget?": [
        ("memory/2026-05-10.md", 1, 5, 0.95822518),
        ("MEMORY.md", 1, 7, 0.852579736),
    ],
    "openclaw|what did we decide about the budget?": [],
    "pinch|when does the contractor start": [
        ("MEMORY.md", 1, 7, 1.0),
        ("memory/2026-04-02.md", 1, 5, 0.41861425),
    ],
    "openclaw|when does the contractor start": [],
    "pinch|database deadline": [
        ("MEMORY.md", 1, 7, 0.961830193),
        ("memory/2026-04-02.md", 1, 5, 0.961289653),
        ("memory/2026-05-10.md", 1, 5, 0.599325737),
    ],
    "openclaw|database deadline": [],
    "pinch|婚礼预算": [
        ("memory/2026-04-02.md", 1, 5, 0.978461941),
        ("memory/2026-05-10.md", 1, 5, 0.237648027),
    ],
    "openclaw|婚礼预算": [
        ("memory/2026-04-02.md", 1, 5, 0.526836986),
    ],
    "pinch|peanuts allergy": [
        ("MEMORY.md", 1, 7, 1.0),
    ],
    "openclaw|peanuts allergy": [
        ("MEMORY.md", 1, 7, 0.383934063),
    ],
}
