"""Triage of a gate decision: the ``gate_flips`` view, ``round_flips`` with both completions and verdicts, the gate
artifact's markdown and ``ratchet report``, on tests/store/test_queries_report.py's store (written by the real ingest)."""

import json

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.flows.report.triage import flips_markdown
from ratchet.store.db import connect, transaction
from ratchet.store.ingest import insert_rows
from ratchet.store.read.flips import flip_counts, round_flips
from tests.flows.report.test_report import page_text
from tests.store.test_queries_report import ES, _traj, _verdict, build_store


@pytest.fixture
def db(tmp_path):
    """Round c1-r1 compared B (incumbent) with C on ES under v1: h1 both right, h2 wrong -> right (hb2/hc2), and a
    prompt h3 added here that goes right -> wrong; a v2 verdict on hc1 must not count (another verifier version)."""
    path = tmp_path / "s.duckdb"
    build_store(path)
    with transaction(path) as con:
        con.execute("UPDATE gate_decisions SET eval_set_id = ?, verifier_version = 'v1' WHERE round_id = 'c1-r1'", [ES])
        insert_rows(
            con, "prompts", [dict(prompt_id="h3", source="s", task="add", question="2 | 3\n?", answer="5", split="heldout")]
        )
        insert_rows(
            con,
            "trajectories",
            [
                _traj("hb3", "h3", "B", "eval_greedy", 0, 7, eval_set=ES),
                _traj("hc3", "h3", "C", "eval_greedy", 0, 9, eval_set=ES),
            ],
        )
        insert_rows(
            con,
            "verdicts",
            [
                _verdict("hb3", True, 1.1, "correct"),
                _verdict("hc3", False, 0.1, "wrong_answer"),
                _verdict("hc1", False, 0.0, "wrong_answer", version="v2"),
            ],
        )
    return path


def test_gate_flips_view_lists_both_directions_through_ratchet_sql(db):
    r = CliRunner().invoke(app, ["sql", "--db", str(db), "--format", "json", "SELECT * FROM gate_flips"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == [
        dict(round_id="c1-r1", eval_set_id=ES, prompt_id="h2", incumbent_correct=False, candidate_correct=True),
        dict(round_id="c1-r1", eval_set_id=ES, prompt_id="h3", incumbent_correct=True, candidate_correct=False),
    ]


def test_round_flips_carry_completions_and_verdicts_right_to_wrong_first(db):
    with connect(db, read_only=True) as con:
        rows = round_flips(con, "c1-r1")
        assert flip_counts(con, "c1-r1") == {"right_to_wrong": 1, "wrong_to_right": 1}
        assert round_flips(con, "c1-r2") == [] and flip_counts(con, "c1-r2") == {"right_to_wrong": 0, "wrong_to_right": 0}
        md = flips_markdown(con, "c1-r1")
    assert [(r["prompt_id"], r["flip"]) for r in rows] == [("h3", "right -> wrong"), ("h2", "wrong -> right")]
    h3 = rows[0]
    assert (h3["question"], h3["gold"], h3["incumbent_completion"], h3["candidate_completion"]) == (
        "2 | 3\n?",
        "5",
        "text hb3",
        "text hc3",
    )
    assert (h3["incumbent_reason"], h3["candidate_reason"]) == ("correct", "wrong_answer")
    assert rows[1]["candidate_finish_reason"] == "length"
    assert "1 right → wrong, 1 wrong → right" in md and "text hc3" in md
    assert "2 \\| 3 ⏎ ?" in md  # a table cell keeps its row: pipes escaped, newlines marked
    assert "wrong (wrong_answer)" in md and "correct (correct, truncated)" in md


def test_report_lists_the_flipped_prompts(db, tmp_path):
    out = tmp_path / "report.html"
    r = CliRunner().invoke(app, ["report", "--db", str(db), "--out", str(out)])
    assert r.exit_code == 0, r.output
    text = page_text(out.read_text())
    assert "Prompts that flipped between incumbent and candidate (1 right → wrong, 1 wrong → right)" in text
    assert "h3 right -> wrong 2 | 3 ? 5 text hb3 correct (correct) text hc3 wrong (wrong_answer)" in text
