"""`ratchet status` and the report show each round's zero-variance groups, their tokens and the picks' pass rates."""

import json

from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.flows.report.picks import histogram_text, selection_rows
from ratchet.flows.report.render import render_report, report_pages
from ratchet.loop.campaign.round_context import campaign_id_of
from ratchet.store.db import connect
from ratchet.verifiers.reward import VERSION
from tests.store.test_prompt_history import build_selection_store


def test_status_and_report_show_zero_variance_share_tokens_and_pass_rate_histogram(tmp_path):
    db = build_selection_store(tmp_path, campaign_id_of("camp"), VERSION)
    with connect(db, read_only=True) as con:
        rows = {r["round_index"]: r for r in selection_rows(con, "camp")}
    assert rows[4]["pass_rate_histogram"] == [0, 0, 1, 0, 1] and rows[4]["refilled"] == 1
    assert rows[3]["zero_variance_share"] == 1.0 and rows[3]["zero_variance_token_share"] == 1.0
    assert rows[3]["pass_rate_histogram"] == []  # no round_prompts rows: a round from before selection was stored
    assert histogram_text([0, 0, 1, 0, 1]) == "0-.2:0 .2-.4:0 .4-.6:1 .6-.8:0 .8-1:1"
    r = CliRunner().invoke(app, ["status", "--db", str(db), "--format", "json"])
    assert r.exit_code == 0, r.output
    by_index = {x["index"]: x for x in json.loads(r.stdout)["campaigns"][0]["rounds"]}
    assert by_index[4]["selection"]["zero_variance_groups"] == 0 and by_index[4]["selection"]["drawn"] == 2
    assert by_index[2]["selection"]["zero_variance_share"] == 0.0
    table = CliRunner().invoke(app, ["status", "--db", str(db)])
    assert "round 3 (uniform): zero-variance groups 3/3 (100%)" in table.output.replace("\n", " ")
    page = render_report(db, report_pages(db))
    assert "Prompt selection and zero-variance groups" in page and ".4-.6:1" in page


def test_report_details_only_the_last_rounds_unless_last_is_0(tmp_path):
    """A year of nightly rounds: each round's details cost queries over every trajectory (issue 41, item 4), so the
    page details the last --last rounds; the rounds table and the plots still show every round."""
    db = build_selection_store(tmp_path, campaign_id_of("camp"), VERSION)
    page = report_pages(db, last=2)[0]
    assert len(page["rounds"]) == 5 and [r["round_index"] for r in page["detailed"]] == [4, 5]
    assert "verifier" not in page["rounds"][0]
    html = render_report(db, [page])
    assert "Details of the last 2 of 5 rounds" in html and "Round 3 (" not in html and "Round 4 (" in html
    every = render_report(db, report_pages(db, last=0))
    assert "Details of the last" not in every and "Round 1 (" in every
    out = tmp_path / "r.html"
    r = CliRunner().invoke(app, ["report", "--db", str(db), "--out", str(out), "--last", "1"])
    assert r.exit_code == 0, r.output
    assert "Details of the last 1 of 5 rounds" in out.read_text()
