"""Cost per promoted point (store.costs) in `ratchet status` and `ratchet report`, on tests/store/test_queries_report.py's
store (campaign `one`: round 1 promoted +0.5 after 5 minutes, round 2 failed after 1; hand-counted tokens)."""

import json

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.store.db import connect, transaction
from ratchet.store.read.costs import cost_per_point, round_costs
from tests.flows.report.test_report import page_text
from tests.store.test_queries_report import build_store


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "s.duckdb"
    build_store(path)
    with transaction(path) as con:
        con.execute("""UPDATE rounds SET stage_seconds_json = '{"generate": 30.0, "train": 90.0}' WHERE round_id = 'c1-r1'""")
    return path


def test_round_costs_and_cost_per_point(db):
    with connect(db, read_only=True) as con:
        rows = round_costs(con, "one")
        assert round_costs(con, "two") == []
    r1, r2 = rows
    # rollouts 10 + 20 + 30 + 40 + 5 + 5, evaluations 8 + 12 + 4 + 6
    assert (r1["tokens"], r1["compute_s"], r1["wall_s"], r1["promoted_points"]) == (140, 120.0, 300.0, 50.0)
    assert (r2["tokens"], r2["compute_s"], r2["wall_s"], r2["promoted_points"]) == (0, 0.0, 60.0, 0.0)
    c = cost_per_point(rows)
    assert (c["tokens_per_point"], c["compute_s_per_point"], c["wall_s_per_point"]) == (2.8, 2.4, 7.2)
    assert cost_per_point([r2])["tokens_per_point"] is None


def test_status_and_report_show_the_cost_per_point(db, tmp_path):
    r = CliRunner().invoke(app, ["status", "--db", str(db), "--format", "json"])
    assert r.exit_code == 0, r.output
    one = next(c for c in json.loads(r.stdout)["campaigns"] if c["name"] == "one")
    assert one["cost"]["tokens_per_point"] == 2.8 and one["rounds"][0]["tokens"] == 140
    r = CliRunner().invoke(app, ["status", "--db", str(db)])
    line = " ".join(r.stdout.split())  # the console wraps long lines
    assert "cost: 140 tokens, 2.0 compute min, 6.0 wall min; +50.0 points of promoted pass@1: 3 tokens" in line
    out = tmp_path / "report.html"
    assert CliRunner().invoke(app, ["report", "--db", str(db), "--out", str(out)]).exit_code == 0
    text = page_text(out.read_text())
    assert "140 tokens generated, 2.0 compute min, 6.0 wall min over 2 rounds; +50.0 points of promoted pass@1: 3 tokens" in text
