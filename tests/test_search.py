"""memory_search: keyword and hybrid retrieval, ranking, and the shape of a hit."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from memory.errors import IndexCorruptError
from memory.index.index import MemoryIndex
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.search.candidates import KeywordMatch
from memory.search.hybrid import SearchHit
from memory.search.presets import PRESETS, get_preset
from memory.store.db import open_database
from tests.conftest import (
    IndexFactory,
    WorkspaceFactory,
    keyword_config,
    sqlite_vec_loads,
    use_config,
)

NOW = datetime(2026, 1, 2, 12, 0)

CORPUS = {
    "MEMORY.md": (
        "# Memory\n\n"
        "## Pets\n"
        "- My cat is called Tom and he sleeps on the blue sofa.\n\n"
        "## Hobbies\n"
        "- I painted the kitchen wall green last spring.\n"
    ),
    "USER.md": "# User\n\n- Anna prefers tea to coffee.\n- Ben is allergic to peanuts.\n",
    "memory/2026-01-01.md": "# 2026-01-01\n\n我的猫喜欢蓝色的沙发。\n\n天气很好，我们去了公园。\n",
    "memory/2025-12-20.md": "# 2025-12-20\n\n蓝天下有一只红色的鸟。\n",
    "memory/2025-12-24.md": "# 2025-12-24\n\nBought a new bicycle helmet for the commute.\n",
}


def build(root: Path, files: dict[str, str], config: MemoryConfig) -> MemoryIndex:
    ws = root / "workspace"
    for rel, text in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text, encoding="utf-8")
    idx = MemoryIndex.open(ws, root / "agent.sqlite", config)
    idx.sync()
    return idx


# Searching does not change an index: the corpus indexes are built once for the module.
@pytest.fixture(scope="module")
def keyword_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemoryIndex]:
    idx = build(tmp_path_factory.mktemp("keyword"), CORPUS, keyword_config())
    yield idx
    idx.close()


def require_backend(backend: str) -> None:
    if backend == "sqlite-vec" and not sqlite_vec_loads():
        pytest.skip("sqlite-vec cannot be loaded by this Python's SQLite")


# Every hybrid test runs on both vector backends; numpy always, sqlite-vec where it loads.
@pytest.fixture(scope="module", params=["sqlite-vec", "numpy"])
def hybrid_index(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, use_model: None
) -> Iterator[MemoryIndex]:
    require_backend(request.param)
    root = tmp_path_factory.mktemp("hybrid")
    idx = build(root, CORPUS, use_config(vector_backend=request.param))
    assert idx.vector_backend == request.param
    yield idx
    idx.close()


def paths(hits: list[SearchHit]) -> list[str]:
    return [h.path for h in hits]


# ---- keyword side ---------------------------------------------------------------------------


def test_a_one_character_chinese_word_is_found(keyword_index: MemoryIndex) -> None:
    assert paths(keyword_index.search("猫", now=NOW)) == ["memory/2026-01-01.md"]


def test_a_two_character_chinese_word_is_found_as_a_phrase(keyword_index: MemoryIndex) -> None:
    # 2025-12-20 has 蓝 and 色 but not 蓝色: it must not match.
    assert paths(keyword_index.search("蓝色", now=NOW)) == ["memory/2026-01-01.md"]


def test_a_chinese_question_finds_its_answer(keyword_index: MemoryIndex) -> None:
    hits = keyword_index.search("我的猫喜欢什么？", now=NOW)

    assert paths(hits)[0] == "memory/2026-01-01.md"
    assert "我的猫喜欢蓝色的沙发" in hits[0].snippet


def test_english_words_match_their_stems(keyword_index: MemoryIndex) -> None:
    assert paths(keyword_index.search("painting", now=NOW)) == ["MEMORY.md"]
    assert paths(keyword_index.search("sleeping cats", now=NOW)) == ["MEMORY.md"]


def test_pinch_keywords_are_or_joined(keyword_index: MemoryIndex) -> None:
    # No chunk has both words; the pinch preset still finds the helmet.
    hits = keyword_index.search("helmet submarine", preset="pinch", now=NOW)

    assert paths(hits) == ["memory/2025-12-24.md"]


def test_openclaw_keywords_are_and_joined(keyword_index: MemoryIndex) -> None:
    both = keyword_index.search("bicycle helmet", preset="openclaw", min_score=0, now=NOW)
    one = keyword_index.search("helmet submarine", preset="openclaw", min_score=0, now=NOW)

    assert paths(both) == ["memory/2025-12-24.md"]
    assert one == []


def test_keyword_only_index_still_finds_things(keyword_index: MemoryIndex) -> None:
    assert keyword_index.degraded_reason() is not None
    for preset in PRESETS:
        hits = keyword_index.search("Ben peanuts", preset=preset, min_score=0, now=NOW)
        assert paths(hits)[:1] == ["USER.md"], preset


ODD_QUERIES = ["?!.", "the and of", "what is it?", '"NEAR( AND OR NOT *', "-- ; DROP", "   "]


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_odd_queries_do_not_crash_keyword_only(keyword_index: MemoryIndex, preset: str) -> None:
    for query in ODD_QUERIES:
        assert isinstance(keyword_index.search(query, preset=preset, now=NOW), list)


def test_odd_queries_do_not_crash_hybrid(hybrid_index: MemoryIndex) -> None:
    for query in ODD_QUERIES:
        assert isinstance(hybrid_index.search(query, now=NOW), list)


def test_an_empty_query_finds_nothing(hybrid_index: MemoryIndex) -> None:
    assert hybrid_index.search("  \n\t ") == []


# ---- hits -----------------------------------------------------------------------------------


def test_a_hit_carries_path_lines_score_snippet_source_and_origin(
    hybrid_index: MemoryIndex,
) -> None:
    ws = hybrid_index.workspace

    hit = hybrid_index.search("Ben peanuts", now=NOW)[0]

    assert hit.path == "USER.md"
    lines = (ws / "USER.md").read_text().split("\n")
    assert 1 <= hit.start_line <= hit.end_line <= len(lines)
    assert "Ben is allergic to peanuts." in "\n".join(lines[hit.start_line - 1 : hit.end_line])
    assert "Ben is allergic to peanuts." in hit.snippet
    assert 0 < hit.score <= 1
    assert (hit.source, hit.origin) == ("memory", "owner")
    assert hit.to_dict() == {
        "path": "USER.md",
        "startLine": hit.start_line,
        "endLine": hit.end_line,
        "score": round(hit.score, 4),
        "snippet": hit.snippet,
        "source": "memory",
        "origin": "owner",
    }


def test_log_hits_come_from_the_agent_with_their_day(keyword_index: MemoryIndex) -> None:
    (hit,) = keyword_index.search("bicycle helmet", now=NOW)

    assert (hit.origin, hit.day) == ("agent", "2025-12-24")


def test_snippets_stay_within_the_presets_limit(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    long_line = "The observatory telescope needs recalibration before the eclipse. " * 40
    many_lines = "".join(f"Telescope note {n}: check the mirror alignment.\n" for n in range(60))
    ws = make_workspace({"memory/one-line.md": long_line + "\n", "memory/lines.md": many_lines})
    idx = make_index(ws, keyword_config())
    idx.sync()

    for name, preset in PRESETS.items():  # focused (pinch, keyword), head (openclaw, vector)
        hits = idx.search("telescope", preset=name, min_score=0, now=NOW)
        assert hits, name
        assert all(len(h.snippet) <= preset.snippet_chars for h in hits), name
        assert max(len(h.snippet) for h in hits) > preset.snippet_chars - 100, name


def test_max_results_is_respected(keyword_index: MemoryIndex, hybrid_index: MemoryIndex) -> None:
    for idx in (keyword_index, hybrid_index):
        assert len(idx.search("the cat tea sofa helmet", max_results=2, min_score=0)) == 2
        assert len(idx.search("the cat tea sofa helmet", max_results=1, min_score=0)) == 1


def test_min_score_filters_weak_hits(hybrid_index: MemoryIndex) -> None:
    everything = hybrid_index.search("cat sofa", min_score=0, now=NOW)
    strong = hybrid_index.search("cat sofa", min_score=0.9, now=NOW)

    assert len(everything) > len(strong) >= 1
    assert all(h.score >= 0.9 for h in strong)


def test_default_preset_comes_from_the_settings(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace(CORPUS), keyword_config(preset="openclaw"))
    idx.sync()

    # openclaw ANDs the keywords: nothing has both.
    assert idx.search("helmet submarine", min_score=0, now=NOW) == []


def test_an_unknown_preset_is_an_error_listing_the_known_ones(keyword_index: MemoryIndex) -> None:
    with pytest.raises(ValueError, match=r"Unknown search preset 'nope'.*keyword.*openclaw.*pinch"):
        keyword_index.search("cat", preset="nope")


# ---- vectors --------------------------------------------------------------------------------


def test_vectors_find_a_paraphrase_with_no_shared_keyword(hybrid_index: MemoryIndex) -> None:
    assert paths(hybrid_index.search("feline", preset="keyword", now=NOW)) == []

    hits = hybrid_index.search("feline companion", now=NOW)

    # The English note about the cat, and the Chinese one (我的猫 = my cat).
    assert set(paths(hits)[:2]) == {"MEMORY.md", "memory/2026-01-01.md"}


@pytest.mark.parametrize("backend", ["sqlite-vec", "numpy"])
def test_a_reworded_question_finds_its_note_among_filler_sharing_one_word(
    tmp_path: Path, use_model: None, backend: str
) -> None:
    require_backend(backend)
    files = {"MEMORY.md": "# Memory\n\n- My cat is called Tom and he sleeps on the blue sofa.\n"}
    for day in range(1, 9):  # eight notes that share only "name" with the question
        files[f"memory/2026-01-0{day}.md"] = (
            f"# 2026-01-0{day}\n\nWe still need a name for the new project at work.\n\n"
            "The name on the parcel was spelled wrong again.\n"
        )
    idx = build(tmp_path, files, use_config(vector_backend=backend))
    question = "What is the name of my feline companion?"
    # (Issue 20's keyword calibration alone also finds it: tests/test_keyword_calibration.py.)
    without_slots = get_preset("pinch").with_overrides(
        vector_slots=0,
        keyword_coverage_power=0,
        keyword_hit_coverage_power=0,
        keyword_evidence_share=0,
        vector_floor_margin=0,
    )

    hits = idx.search(question, now=NOW, max_results=3)
    by_hybrid_score_alone = idx.search(question, preset=without_slots, now=NOW, max_results=3)
    idx.close()

    assert "MEMORY.md" in paths(hits)
    assert "Tom" in hits[paths(hits).index("MEMORY.md")].snippet
    assert "MEMORY.md" not in paths(by_hybrid_score_alone)  # the filler outranks it there


def test_sqlite_vec_and_numpy_backends_give_the_same_results(
    tmp_path: Path, make_workspace: WorkspaceFactory, use_model: None
) -> None:
    require_backend("sqlite-vec")
    ws = make_workspace(CORPUS)
    vec = MemoryIndex.open(ws, tmp_path / "agent.sqlite", use_config(vector_backend="sqlite-vec"))
    vec.sync()
    # The same database file, searched through the other backend.
    numpy = MemoryIndex.open(ws, tmp_path / "agent.sqlite", use_config(vector_backend="numpy"))
    assert (vec.vector_backend, numpy.vector_backend) == ("sqlite-vec", "numpy")

    for query in ["what drink does Anna like", "蓝色", "feline companion", "helmet"]:
        for preset in sorted(PRESETS):
            a = vec.search(query, preset=preset, min_score=0, now=NOW)
            b = numpy.search(query, preset=preset, min_score=0, now=NOW)
            assert [(h.path, h.start_line, h.end_line) for h in a] == [
                (h.path, h.start_line, h.end_line) for h in b
            ], (query, preset)
            assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)
    vec.close()
    numpy.close()


# ---- ranking --------------------------------------------------------------------------------

DENTIST = "Dentist appointment moved to Thursday afternoon.\n"


@pytest.fixture
def dated_index(make_workspace: WorkspaceFactory, make_index: IndexFactory) -> MemoryIndex:
    ws = make_workspace(
        {"memory/2025-12-31.md": DENTIST, "memory/2025-06-01.md": DENTIST, "MEMORY.md": DENTIST}
    )
    idx = make_index(ws, keyword_config())
    idx.sync()
    return idx


def test_the_older_of_two_identical_logs_ranks_lower(dated_index: MemoryIndex) -> None:
    hits = dated_index.search("dentist appointment", preset="pinch", now=NOW)
    by_path = {h.path: h.score for h in hits}

    assert by_path["memory/2025-06-01.md"] < by_path["memory/2025-12-31.md"]


def test_memory_md_never_decays(dated_index: MemoryIndex) -> None:
    soon = dated_index.search("dentist appointment", now=NOW)
    decade = dated_index.search("dentist appointment", now=datetime(2036, 1, 1))

    def score(hits: list[SearchHit], path: str) -> float:
        return next(h.score for h in hits if h.path == path)

    assert score(decade, "MEMORY.md") == score(soon, "MEMORY.md")
    assert score(decade, "memory/2025-12-31.md") < score(soon, "memory/2025-12-31.md")
    assert paths(decade)[0] == "MEMORY.md"


def test_presets_without_decay_rank_identical_logs_equally(dated_index: MemoryIndex) -> None:
    hits = dated_index.search("dentist appointment", preset="keyword", now=NOW)

    assert len({round(h.score, 9) for h in hits}) == 1


GARAGE = "memory/garage.md"


def test_an_importance_marker_lifts_its_chunk(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    key = "The spare key is under the blue flowerpot."
    ws = make_workspace(
        {
            "memory/plain.md": f"{key}\n",
            "memory/marked.md": f"{key} <!-- importance: 5 -->\n",
            # The best keyword match, so that the two above score below 1.
            "memory/garage.md": "The spare key to the garage: the spare key hangs in the garage.\n",
        }
    )
    idx = make_index(ws, keyword_config())
    idx.sync()
    without = get_preset("pinch").with_overrides(importance_weight=0.0)

    # The marker is not text: without its weight the two chunks score the same…
    plain = [h for h in idx.search("spare key", preset=without, now=NOW) if h.path != GARAGE]
    assert len(plain) == 2 and plain[0].score == plain[1].score
    # …and with it the marked one comes first.
    hits = [h for h in idx.search("spare key", preset="pinch", now=NOW) if h.path != GARAGE]
    assert paths(hits)[0] == "memory/marked.md"
    assert hits[0].score > hits[1].score


def test_mmr_prefers_a_different_chunk_over_a_near_duplicate(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    gift = "Anna's birthday is on 12 March; she would love a new garden hose."
    ws = make_workspace(
        {
            "memory/a.md": f"{gift}\n",
            "memory/b.md": f"{gift} Again.\n",
            "memory/c.md": f"{gift} Really.\n",
            "memory/party.md": (
                "For Anna's birthday party we booked the Italian place on Elm Street, "
                "with a table for twelve near the window.\n"
            ),
        }
    )
    idx = make_index(ws, keyword_config())
    idx.sync()
    no_mmr = get_preset("pinch").with_overrides(mmr_lambda=None)

    plain = idx.search("Anna birthday", preset=no_mmr, max_results=2, now=NOW)
    diverse = idx.search("Anna birthday", preset="pinch", max_results=2, now=NOW)

    assert "memory/party.md" not in paths(plain)  # two copies of the gift note
    assert paths(diverse)[0] == paths(plain)[0]
    assert paths(diverse)[1] == "memory/party.md"


def test_scores_stay_between_0_and_1_with_importance(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace({"MEMORY.md": "Passport number is in the safe. <!-- importance: 5 -->\n"})
    idx = make_index(ws, keyword_config())
    idx.sync()

    (hit,) = idx.search("passport safe", now=NOW)

    assert 0 < hit.score <= 1


def test_a_query_about_something_never_recorded_finds_nothing(
    hybrid_index: MemoryIndex,
) -> None:
    assert hybrid_index.search("quantum chromodynamics lecture notes", now=NOW) == []


def test_results_are_best_first_without_mmr(hybrid_index: MemoryIndex) -> None:
    no_mmr = get_preset("pinch").with_overrides(mmr_lambda=None)

    hits = hybrid_index.search("cat sofa tea", preset=no_mmr, min_score=0, now=NOW)

    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_hit_lines_and_snippets_match_the_files(hybrid_index: MemoryIndex) -> None:
    ws = hybrid_index.workspace

    for hit in hybrid_index.search("cat tea helmet 猫", min_score=0, now=NOW):
        lines = (ws / hit.path).read_text().split("\n")
        chunk = "\n".join(lines[hit.start_line - 1 : hit.end_line])
        assert all(line in chunk for line in hit.snippet.split("\n"))


# ---- a damaged or busy database is an error, never "no hits" ---------------------------------


def damage_table(db_path: Path, table: str) -> None:
    """Overwrite the root page of `table` in a closed database file with garbage."""
    db = open_database(db_path)
    (root,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,))[0]
    (page_size,) = db.execute("PRAGMA page_size")[0]
    db.close()  # the last connection checkpoints the WAL into the file
    with db_path.open("r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xff" * page_size)


def test_a_damaged_keyword_index_raises_instead_of_finding_nothing(
    tmp_path: Path, make_workspace: WorkspaceFactory
) -> None:
    ws = make_workspace({"MEMORY.md": "- The blue umbrella is in the hallway cupboard.\n" * 50})
    idx = MemoryIndex.open(ws, tmp_path / "agent.sqlite", keyword_config())
    idx.sync()
    assert idx.search("umbrella", now=NOW)
    idx.close()
    damage_table(tmp_path / "agent.sqlite", "memory_fts_data")

    idx = MemoryIndex.open(ws, tmp_path / "agent.sqlite", keyword_config())
    with pytest.raises(IndexCorruptError, match=r"damaged.*pinch memory index"):
        idx.search("umbrella", now=NOW)
    idx.close()


def test_a_query_fts5_cannot_parse_finds_nothing_by_keyword(keyword_index: MemoryIndex) -> None:
    from memory.search.candidates import keyword_candidates
    from memory.store.search_queries import search_queries

    generation = keyword_index.active_generation()
    assert generation is not None
    assert (
        keyword_candidates(search_queries(keyword_index.db), generation[0], '"unclosed', 10, [""])
        == []
    )
    assert (
        keyword_candidates(search_queries(keyword_index.db), generation[0], "AND OR (", 10, [""])
        == []
    )


# ---- very common words at scale -------------------------------------------------------------


@pytest.fixture
def common_words_index(make_workspace: WorkspaceFactory, make_index: IndexFactory) -> MemoryIndex:
    files = {f"memory/note{i:02d}.md": f"Anna walked the dog, day {i}.\n" for i in range(20)}
    files["memory/note20.md"] = "Anna saw a zeppelin over the dog park.\n"
    idx = make_index(make_workspace(files), keyword_config())
    idx.sync()
    return idx


def generation_of(idx: MemoryIndex) -> int:
    active = idx.active_generation()
    assert active is not None
    return active[0]


def test_a_very_common_word_is_left_out_of_the_keyword_query(
    common_words_index: MemoryIndex,
) -> None:
    from memory.search.candidates import common_term_match
    from memory.store.search_queries import search_queries

    idx = common_words_index
    match = common_term_match(
        search_queries(idx.db), generation_of(idx), ["anna", "zeppelin"], 0.2, floor=1
    )

    assert match == KeywordMatch('"zeppelin"')


def record_counts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str | None, int | None]]:
    """Every count the common-word test makes, as (expression, limit), recorded as it runs."""
    from memory.search import candidates as search

    counted: list[tuple[str | None, int | None]] = []
    real = search._match_count

    def counting(db: object, match: str | None, limit: int | None, *rest: object) -> int:
        counted.append((match, limit))
        return real(db, match, limit, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(search, "_match_count", counting)
    return counted


def test_term_counts_are_remembered_until_the_index_changes(
    common_words_index: MemoryIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memory.search.candidates import common_term_match
    from memory.store.search_queries import search_queries

    idx = common_words_index
    counted = record_counts(monkeypatch)
    common_term_match(
        search_queries(idx.db), generation_of(idx), ["anna", "zeppelin"], 0.2, floor=1
    )
    first = len(counted)
    common_term_match(
        search_queries(idx.db), generation_of(idx), ["anna", "zeppelin"], 0.2, floor=1
    )
    assert len(counted) == first  # nothing counted again

    note = idx.workspace / "memory" / "note21.md"
    note.write_text("Another zeppelin, and Anna again.\n")
    idx.sync()  # a write: every count may have changed
    match = common_term_match(
        search_queries(idx.db), generation_of(idx), ["anna", "zeppelin"], 0.2, floor=1
    )

    assert len(counted) > first and match == KeywordMatch('"zeppelin"')


def test_when_every_word_is_common_the_chunks_holding_all_of_them_are_ranked(
    common_words_index: MemoryIndex,
) -> None:
    from memory.search.candidates import common_term_match
    from memory.store.search_queries import search_queries

    idx = common_words_index
    match = common_term_match(
        search_queries(idx.db), generation_of(idx), ["anna", "dog"], 0.2, floor=1
    )

    assert match == KeywordMatch('"anna" AND "dog"', since=None)  # 21 chunks: no window


def test_an_and_of_common_words_is_looked_for_among_the_newest_chunks_only(
    common_words_index: MemoryIndex,
) -> None:
    """Words each held by most chunks: the AND is ranked among the newest `window` chunks
    (bounded work at any size); when the words meet only in older ones, the rarest alone."""
    from memory.search.candidates import common_term_match, keyword_candidates
    from memory.store.search_queries import search_queries

    idx = common_words_index
    queries = search_queries(idx.db)
    ids = sorted(int(r[0]) for r in idx.db.execute("SELECT id FROM memory_chunks"))
    zeppelin = [i for i, _ in queries.keyword_ranked('"zeppelin"', 10)]
    assert len(ids) == 21 and len(zeppelin) == 1
    newest_five = ids[-5:]

    match = common_term_match(queries, generation_of(idx), ["anna", "dog"], 0.2, 1, window=5)
    assert match == KeywordMatch('"anna" AND "dog"', since=newest_five[0])
    found = keyword_candidates(queries, generation_of(idx), match, 50, [""], rank_cap=3000)
    assert sorted(i for i, _ in found) == newest_five


def test_when_common_words_meet_only_outside_the_window_the_rarest_is_ranked_alone(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    from memory.search.candidates import common_term_match
    from memory.store.search_queries import search_queries

    files = {"memory/a.md": "Anna walked the dog.\n"}  # the one chunk with both words
    files.update({f"memory/b{i:02d}.md": "Anna sang.\n" for i in range(12)})
    files.update({f"memory/c{i:02d}.md": "The dog slept.\n" for i in range(8)})
    idx = make_index(make_workspace(files), keyword_config())
    idx.sync()
    queries = search_queries(idx.db)
    generation = generation_of(idx)
    both = [i for i, _ in queries.keyword_ranked('"anna" AND "dog"', 10)]
    assert len(both) == 1

    def newest_first(word: str) -> list[int]:
        return sorted((i for i, _ in queries.keyword_ranked(f'"{word}"', 50)), reverse=True)

    # A window of w reaches back to the lower of the two words' w-th newest chunk: the chunk
    # with both is outside it while each word has at least w newer chunks.
    outside = min(newest_first("anna").index(both[0]), newest_first("dog").index(both[0]))
    assert outside > 0  # the chunk with both is the oldest of at least one word

    match = common_term_match(queries, generation, ["anna", "dog"], 0.2, 1, window=outside)
    assert match == KeywordMatch('"dog"')  # 9 chunks against Anna's 13
    match = common_term_match(queries, generation, ["anna", "dog"], 0.2, 1, window=outside + 1)
    assert match == KeywordMatch('"anna" AND "dog"', since=both[0])
    # A word with fewer chunks than the window bounds the AND itself: no window at all.
    match = common_term_match(queries, generation, ["anna", "dog"], 0.2, 1, window=10)
    assert match == KeywordMatch('"anna" AND "dog"', since=None)


def test_one_common_word_among_unknown_ones_is_ranked_without_a_full_count(
    common_words_index: MemoryIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memory.search.candidates import common_term_match
    from memory.store.search_queries import search_queries

    idx = common_words_index
    counted = record_counts(monkeypatch)
    match = common_term_match(
        search_queries(idx.db), generation_of(idx), ["anna", "walrus"], 0.2, floor=1
    )

    assert match == KeywordMatch('"anna"')
    assert counted and all(limit is not None for _, limit in counted)  # none counted in full


def test_the_rank_cap_ranks_only_the_newest_matching_chunks(
    common_words_index: MemoryIndex,
) -> None:
    from memory.search.candidates import keyword_candidates
    from memory.store.search_queries import search_queries

    idx = common_words_index
    newest = sorted(int(r[0]) for r in idx.db.execute("SELECT rowid FROM memory_fts"))[-3:]

    found = keyword_candidates(
        search_queries(idx.db), generation_of(idx), '"anna"', 10, [""], rank_cap=3
    )

    assert sorted(i for i, _ in found) == newest


def test_marker_words_do_not_match_a_query(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    """Pinch's markers and a template's guidance are not text: a question about a key finds the
    note about the key, not every session note whose header says `key: …`."""
    ws = make_workspace(
        {
            "memory/2026-11-30-chat.md": (
                "# Session 2026-11-30 10:00 – 10:20\n"
                "<!-- session: 58bf5655 | key: main:cli:direct:owner | messages: 4 -->\n\n"
                "**Owner** (10:01): Let's plan the weekend.\n"
            ),
            "USER.md": "## Preferences\n<!-- Communication style, likes and dislikes. -->\n",
            "memory/notes.md": "The spare key is under the blue flowerpot.\n",
        }
    )
    idx = make_index(ws, keyword_config())
    idx.sync()

    assert paths(idx.search("where is the spare key", preset="keyword", now=NOW)) == [
        "memory/notes.md"
    ]
    assert idx.search("dislikes", preset="keyword", now=NOW) == []


def test_a_20000_character_query_answers_quickly_and_still_finds_the_note(
    tmp_path: Path,
) -> None:
    # The default local model embeds ≈1.3 ms a CJK token: uncut, this query took ≈28 s.
    config = MemoryConfig(embedding=EmbeddingConfig(provider="local"))
    idx = build(tmp_path, CORPUS, config)
    try:
        filler = "这是一段很长的粘贴文字，内容和问题无关，只是占了很多位置。" * 700
        query = "我的猫喜欢什么颜色的沙发？" + filler
        assert len(query) > 20_000
        idx.search("warm up the model", record=False)

        started = time.monotonic()
        hits = idx.search(query, record=False)
        elapsed = time.monotonic() - started

        assert elapsed < 2.0
        assert "memory/2026-01-01.md" in paths(hits)
    finally:
        idx.close()


def test_only_the_first_64_distinct_terms_of_a_query_are_searched(
    keyword_index: MemoryIndex,
) -> None:
    padding = " ".join(f"word{i}" for i in range(64))

    assert paths(keyword_index.search(f"bicycle helmet {padding}"))
    assert not paths(keyword_index.search(f"{padding} bicycle helmet"))
