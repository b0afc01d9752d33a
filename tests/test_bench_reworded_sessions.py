"""bench/reworded_sessions.py: the multi-session set of reworded questions is valid LoCoMo
data, deterministic, and no question shares a content word with its evidence."""

from __future__ import annotations

import json
from pathlib import Path

from bench import reworded_sessions as rs
from bench.compaction_survival import shared_terms
from bench.locomo import load_locomo


def test_the_set_loads_as_locomo_with_every_evidence_turn(tmp_path: Path) -> None:
    out = tmp_path / "set.json"
    rs.main([str(out)])
    conversations = load_locomo(out)

    assert len(conversations) == 2
    assert sum(len(c.questions) for c in conversations) == len(rs.SINGLES) + len(rs.DOUBLES)
    assert all(c.skipped_questions == 0 and c.dropped_evidence == 0 for c in conversations)
    for conv in conversations:
        turns = {t.dia_id: t.text for s in conv.sessions for t in s.turns}
        for q in conv.questions:
            assert len(q.evidence) == (2 if q.category == 1 else 1)
            for dia_id in q.evidence:
                assert not shared_terms(turns[dia_id], q.question), (q.question, turns[dia_id])
        # a double's two halves are in different sessions
        for q in conv.questions:
            if q.category == 1:
                assert len({d.split(":")[0] for d in q.evidence}) == 2


def test_the_same_seed_writes_the_same_file() -> None:
    assert json.dumps(rs.build(11)) == json.dumps(rs.build(11))
    assert json.dumps(rs.build(11)) != json.dumps(rs.build(12))
