"""`ratchet report`, the round's metrics rows and the pass@1 plot, on a store written through the real ingest.

The store is tests/store/test_queries_report.py's (values checked by hand there): campaign `one`
with a promoted GRPO round 1 and a round 2 that failed before its gate, campaign `two` without rounds.
tests/flows/report/test_report_flow.py does the same on a store made by the real round flow (slow).
"""

import base64
import html
import re

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.flows.report.render import metrics_rows, pass1_plot, write_pass1_plot
from ratchet.store.db import connect, init_db, transaction
from ratchet.store.ingest import insert_rows
from tests.store.test_queries_report import T0, build_store

runner = CliRunner()


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "s.duckdb"
    build_store(path)
    return path


def images(page: str) -> list[bytes]:
    """The inline PNGs of an HTML page, decoded."""
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def page_text(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def test_report_shows_rounds_decisions_failed_round_plot_and_reasons(db, tmp_path):
    out = tmp_path / "sub" / "report.html"
    r = runner.invoke(app, ["report", "--db", str(db), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "2 campaign(s), 2 round(s)" in r.stdout
    page = out.read_text()
    text = page_text(page)
    assert "Campaign one" in text and "Campaign two" in text and "No rounds yet in campaign two" in text
    pngs = images(page)
    assert len(pngs) == 1 and pngs[0].startswith(b"\x89PNG\r\n\x1a\n")  # campaign one's plot, inline
    assert 'src="http' not in page and "<script" not in page and "<link" not in page  # self-contained
    assert "Round 1 (completed, promote)" in text and "better" in text
    assert "Round 2 (failed)" in text and "no gate decision" in text
    assert "base held-out pass@1 0.500" in text
    # Verdict reasons of round 1's rollouts by task (newest verdicts: a1 was re-judged correct).
    assert "add 2 4 0.500 0.500 2 0.575 0.250 0.250 37.0 correct: 2, no_answer: 1, wrong_answer: 1" in text
    assert "mul 1 2 1.000 1.000 2 1.100 0.000 0.000 5.0 correct: 2" in text
    for metric in (
        "heldout/pass@1",
        "heldout/completion_tokens_p90",
        "rollout/pass@1",
        "rollout/pass@2",
        "rollout/format_error_rate",
        "rollout/completion_tokens_p90",
        "rollout/reasons",
        "train/kl",
    ):
        assert metric in text, metric


def test_metrics_rows_carry_the_hand_computed_values(db):
    with connect(db, read_only=True) as con:
        rows = metrics_rows(con, "c1-r1", "v1")
    value = {(m["metric"], m["scope"]): m["value"] for m in rows}
    assert value[("heldout/pass@1", "incumbent B")] == 0.5 and value[("heldout/pass@1", "candidate C")] == 1.0
    assert value[("heldout/completion_tokens_p90", "candidate C")] == 5.8
    assert value[("heldout/format_error_rate", "candidate C")] == 0.5
    assert value[("rollout/pass@1", "rollouts, task add")] == 0.25 and value[("rollout/pass@2", "rollouts, task add")] == 0.5
    assert value[("rollout/pass@1", "rollouts, all tasks")] == 0.5
    assert value[("rollout/pass@2", "rollouts, all tasks")] == round(2 / 3, 4)
    assert value[("rollout/format_error_rate", "rollouts, all tasks")] == round(1 / 6, 4)
    assert value[("rollout/completion_tokens_p90", "rollouts, all tasks")] == 35.0
    assert value[("rollout/reasons", "rollouts, task add")] == "wrong_answer: 2, correct: 1, no_answer: 1"
    assert value[("train/kl", "training (grpo, 6 examples)")] == 0.02
    assert value[("train/loss", "training (grpo, 6 examples)")] == -0.25
    assert not any(m["metric"] == "train/kl/mean" for m in rows)  # shown once, as train/kl
    with connect(db, read_only=True) as con:
        failed = metrics_rows(con, "c1-r2")
    # Round 2 failed before training: only its incumbent C, with the evaluation round 1 stored.
    assert {m["scope"] for m in failed} == {"incumbent C"}
    assert {m["metric"] for m in failed} == {
        "heldout/pass@1",
        "heldout/no_answer_rate",
        "heldout/completion_tokens_p90",
        "heldout/format_error_rate",
        "heldout/truncated_rate",
        "heldout/reasons",
    }


def test_pass1_plot_file(db, tmp_path):
    with connect(db, read_only=True) as con:
        path = write_pass1_plot(con, "one", tmp_path / "round-1" / "report" / "heldout_pass1.png")
        assert pass1_plot(con, "two") is None and write_pass1_plot(con, "two", tmp_path / "two.png") is None  # no rounds
    png = path.read_bytes()
    assert png.startswith(b"\x89PNG") and png[16:24] == (800).to_bytes(4, "big") + (400).to_bytes(4, "big")  # IHDR: 800 x 400 px
    assert not (tmp_path / "two.png").exists() and list(path.parent.iterdir()) == [path]  # no temporary file left


def test_report_of_one_campaign_and_of_an_unknown_one(db, tmp_path):
    out = tmp_path / "two.html"
    r = runner.invoke(app, ["report", "--db", str(db), "--campaign", "two", "--out", str(out)])
    assert r.exit_code == 0 and "1 campaign(s), 0 round(s)" in r.stdout
    assert "Campaign two" in page_text(out.read_text()) and "Campaign one" not in page_text(out.read_text())
    r = runner.invoke(app, ["report", "--db", str(db), "--campaign", "nope", "--out", str(tmp_path / "x.html")])
    assert r.exit_code == 2 and "'nope' is not in" in r.stderr and "one, two" in r.stderr
    assert not (tmp_path / "x.html").exists()


def test_report_on_an_empty_store_says_so(tmp_path):
    db = tmp_path / "empty.duckdb"
    init_db(db)
    r = runner.invoke(app, ["report", "--db", str(db), "--out", str(tmp_path / "e.html")])
    assert r.exit_code == 0 and "no campaigns in" in r.stdout
    assert f"No campaigns in {db} yet" in page_text((tmp_path / "e.html").read_text())


def test_report_shows_a_crashed_round(db, tmp_path):
    with transaction(db) as con:
        insert_rows(
            con,
            "rounds",
            [
                dict(
                    round_id="c1-r3",
                    campaign_id="c1",
                    round_index=3,
                    incumbent_checkpoint_id="C",
                    status="crashed",
                    started_at=T0,
                    finished_at=None,
                )
            ],
        )
    out = tmp_path / "r.html"
    assert runner.invoke(app, ["report", "--db", str(db), "--out", str(out)]).exit_code == 0
    text = page_text(out.read_text())
    assert "Round 3 (crashed): metrics and verifier reasons" in text
    assert re.search(r"3 — crashed C — — — — — — 0 0 0 no gate decision", text)  # no phase; confirmed pass@1 —


def test_report_errors_are_one_line(tmp_path):
    r = runner.invoke(app, ["report", "--db", str(tmp_path / "missing.duckdb"), "--out", str(tmp_path / "r.html")])
    assert r.exit_code == 2 and "no store at" in r.stderr and not (tmp_path / "r.html").exists()
    db = tmp_path / "s.duckdb"
    init_db(db)
    (tmp_path / "dir.html").mkdir()
    r = runner.invoke(app, ["report", "--db", str(db), "--out", str(tmp_path / "dir.html")])
    assert r.exit_code == 2 and "not a regular file" in r.stderr
    # The report never replaces the store it reads (nor a device node).
    before = db.read_bytes()
    r = runner.invoke(app, ["report", "--db", str(db), "--out", str(db)])
    assert r.exit_code == 2 and "the store itself" in r.stderr and db.read_bytes() == before


def test_store_commands_refuse_a_foreign_duckdb_file(tmp_path):
    """status / report / run never treat (or turn) someone else's DuckDB file into a Ratchet store."""
    import duckdb

    from ratchet.store.db import StoreError

    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE mine (x INT)")
    con.close()
    for args in (["status", "--db", str(other)], ["report", "--db", str(other), "--out", str(tmp_path / "r.html")]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and "not a Ratchet store" in r.stderr
    with pytest.raises(StoreError, match="not a Ratchet store"):
        init_db(other)
    con = duckdb.connect(str(other), read_only=True)
    assert [t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()] == ["mine"]
    con.close()


def test_report_reads_a_store_made_before_multi_step_rounds(db, tmp_path):
    """`ratchet report` opens the store read-only (no migration): a store without the `step` columns still reports."""
    with transaction(db) as con:
        con.execute("ALTER TABLE training_runs DROP COLUMN step")
        con.execute("ALTER TABLE trajectories DROP COLUMN step")
    out = tmp_path / "old.html"
    r = runner.invoke(app, ["report", "--db", str(db), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "train/kl" in page_text(out.read_text())


def test_report_counts_a_records_sources_verifier_errors(db, tmp_path):
    from tests.store.test_store import traj

    with transaction(db) as con:
        insert_rows(con, "prompts", [dict(prompt_id="own1", source="own", task="own", question="Say 7.", answer="7",
                                          split="train", task_format="records", record_json='{"prompt": "Say 7."}')])  # fmt: skip
        insert_rows(con, "trajectories", [traj("o1", "own1", "7", round_id="c1-r1"),
                                          traj("o2", "own1", "x", round_id="c1-r1", sample=1)])  # fmt: skip
        insert_rows(con, "verdicts", [
            dict(trajectory_id=t, verifier="plugin:own_checks:verify", verifier_version="v1", reward=float(ok), correct=ok,
                 reason=why, parsed=None, format_ok=None, latency_s=0.0, created_at=T0, read_chars=None if ok else 0)
            for t, ok, why in (("o1", True, "ok"), ("o2", False, "verifier_error"))
        ])  # fmt: skip
    with connect(db, read_only=True) as con:
        rows = metrics_rows(con, "c1-r1", "v1")
    value = {(m["metric"], m["scope"]): m["value"] for m in rows}
    scope = "rollouts, source own (records, verifier plugin:own_checks:verify)"
    assert value[("rollout/verifier_errors", scope)] == 1 and value[("rollout/reasons", scope)] == "ok: 1, verifier_error: 1"
    out = tmp_path / "r.html"
    assert runner.invoke(app, ["report", "--db", str(db), "--out", str(out)]).exit_code == 0
    assert "rollout/verifier_errors" in page_text(out.read_text())


def test_a_running_round_is_marked_running_not_plotted_at_zero_and_one_rounds_drift_reads_in_points(db, monkeypatch):
    """Issue 42, finding 10: `ratchet report` during a round drew it at pass@1 0.0, and one round's drift axis read
    0.96-1.04. A round without a decision is a vertical line now (dashed while it runs), and the drift axes span at
    least -0.1 .. +0.1 around the data, whole rounds on x."""
    from ratchet.flows.report import render

    with transaction(db) as con:
        insert_rows(con, "rounds", [dict(round_id="c1-r3", campaign_id="c1", round_index=3, incumbent_checkpoint_id="C", status="running", started_at=T0, finished_at=None)])  # fmt: skip
    with connect(db, read_only=True) as con:
        _, ax = render.pass1_axes(con, "one")
    vlines = {(line.get_xdata()[0], line.get_linestyle()) for line in ax.lines if len(set(line.get_xdata())) == 1}
    assert (3, "--") in vlines and (2, ":") in vlines  # running round 3; round 2 failed before its gate
    labels = ax.get_legend_handles_labels()[1]
    assert "running: no decision yet" in labels and "no gate (failed, crashed, interrupted)" in labels
    points = [tuple(xy) for c in ax.collections for xy in c.get_offsets()]
    assert not any(x in (2, 3) for x, _ in points)  # nothing drawn at a pass@1 those rounds do not have
    assert any("round 3 running" in t.get_text() for t in ax.texts)
    row = dict(round_index=1, eval_name="heldout", role="gating", change=0.01, drift_upper_bound=None, max_drift=None)
    monkeypatch.setattr(render, "drift_history", lambda con, campaign: [row])
    with connect(db, read_only=True) as con:
        _, ax = render.drift_axes(con, "one")
    lo, hi = ax.get_ylim()
    assert hi - lo >= 0.2 - 1e-9 and lo < 0 < 0.01 < hi and list(ax.get_xticks()) == [1]
