"""``gate.refresh_after`` on a real store: after N promotions the round draws a fresh gating slice from the held-out
reserve (never a prompt pinned before, gating or confirmation), records it as a new eval set version, and the next
decision compares incumbent and candidate on it; an exhausted reserve keeps the slice and says so.

The checkpoints' evaluations are store rows with chosen verdicts (``evaluate_as``: no model calls); the campaign, its
rounds, the refresh and the gate are the real round tasks.
"""

import json
import logging

from ratchet.flows.rounds.campaign import gate, prepare_campaign, start_round
from ratchet.flows.rounds.gating.refresh import refresh_eval_set
from ratchet.loop.campaign.round_context import load_ctx
from ratchet.store.db import query
from tests.flows.rounds.gating.test_gate_replay import _base, config, evaluate_as, run_round, write_tasks


def _campaign(tmp_path, tiny_model_dir, hi, **over):
    tasks = write_tasks(tmp_path, "sums", 1, hi)
    over = {"tasks.source": "jsonl", "tasks.path": str(tasks), "gate.refresh_after": 1, **over}
    path = config(tmp_path, tiny_model_dir, **over)
    prepare_campaign.fn(str(path))
    ctx = load_ctx(path)
    evaluate_as(path, 1, _base(ctx), lambda i, p: i % 2 == 0)  # the base: half right
    return path, ctx


def _split_of(db, ids):
    rows = query(db, "SELECT DISTINCT split FROM prompts WHERE list_contains(?, prompt_id)", [list(ids)])[1]
    return {s for (s,) in rows}


def test_a_refresh_draws_a_new_eval_set_version_and_the_next_decision_uses_it(tmp_path, tiny_model_dir):
    path, ctx = _campaign(tmp_path, tiny_model_dir, 31, **{"tasks.heldout_prompts": 60, "gate.confirmation_prompts": 0})
    db, slice0, es0 = ctx.db, {p.prompt_id for p in ctx.heldout()}, ctx.eval_set_id()
    assert refresh_eval_set.fn(str(path), 1) is None  # no promotion yet: nothing due
    assert run_round(path, 1, lambda i, p: True)["decision"] == "promote"  # cand1: every prompt right

    got = refresh_eval_set.fn(str(path), 2)
    ctx2 = load_ctx(path, 2)
    slice1 = {p.prompt_id for p in ctx2.heldout()}
    assert got["replaced_eval_set_id"] == es0 and got["eval_set_id"] == ctx2.eval_set_id() != es0
    assert len(slice1) == 60 and not slice1 & slice0 and _split_of(db, slice1) == {"heldout"}
    ((version, round_id, promotions, new, old, n, retired),) = query(
        db, "SELECT version, round_id, promotions, eval_set_id, replaced_eval_set_id, num_prompts, "
        "replaced_prompt_ids_json FROM eval_set_versions"
    )[1]  # fmt: skip
    assert (version, round_id, promotions, new, old, n) == (1, ctx2.round_id, 1, got["eval_set_id"], es0, 60)
    assert set(json.loads(retired)) == slice0
    pinned = {p for (p,) in query(db, "SELECT prompt_id FROM eval_set_prompts")[1]}
    assert pinned == slice1  # the store's pin: what prepare-campaign writes to the run dir on the next start
    assert refresh_eval_set.fn(str(path), 2) == got  # a resumed round refreshes once
    assert query(db, "SELECT count(*) FROM eval_set_versions")[1][0][0] == 1

    # The next decision: the incumbent (cand1) measured on the new slice, then a candidate 30 points worse there.
    evaluate_as(path, 2, "cand1", lambda i, p: i < 45)
    inc = start_round.fn(str(path), 2)
    assert inc == "cand1"
    evaluate_as(path, 2, "cand2", lambda i, p: i < 27)
    d = gate.fn(str(path), 2, inc, "cand2")
    assert d["decision"] == "reject"
    row = query(
        db, "SELECT eval_set_id, incumbent_pass1, candidate_pass1 FROM gate_decisions WHERE round_id = ?", [ctx2.round_id]
    )
    assert row[1][0] == (got["eval_set_id"], 0.75, 0.45)  # both on the new slice's 60 prompts, not on the old one
    assert query(db, "SELECT num_prompts FROM gate_set_decisions WHERE round_id = ?", [ctx2.round_id])[1] == [(60,)]

    # Round 3 promotes, so round 4 draws version 2: outside both earlier slices.
    evaluate_as(path, 3, "cand1", lambda i, p: i < 45)
    assert run_round(path, 3, lambda i, p: i < 50)["decision"] == "promote"
    assert refresh_eval_set.fn(str(path), 4)["replaced_eval_set_id"] == got["eval_set_id"]
    slice2 = {p.prompt_id for p in load_ctx(path, 4).heldout()}
    assert len(slice2) == 60 and not slice2 & (slice0 | slice1)


def test_an_exhausted_reserve_keeps_the_slice_and_says_so(tmp_path, tiny_model_dir, caplog):
    # 300 questions, 78 held out (by hash): a 30-prompt slice can be refreshed once, not twice
    path, ctx = _campaign(tmp_path, tiny_model_dir, 11, **{"tasks.heldout_prompts": 30})
    assert run_round(path, 1, lambda i, p: True)["decision"] == "promote"
    assert refresh_eval_set.fn(str(path), 2) is not None
    evaluate_as(path, 2, "cand1", lambda i, p: i < 15)
    assert run_round(path, 2, lambda i, p: i < 25)["decision"] == "promote"
    before = [p.prompt_id for p in load_ctx(path, 3).heldout()]
    with caplog.at_level(logging.WARNING):
        assert refresh_eval_set.fn(str(path), 3) is None
    (line,) = [r.getMessage() for r in caplog.records if "refresh_after" in r.getMessage()]
    assert "reserve of eval set 'heldout' is exhausted" in line and "keeping the current gating slice" in line
    assert [p.prompt_id for p in load_ctx(path, 3).heldout()] == before
    assert query(ctx.db, "SELECT count(*) FROM eval_set_versions")[1][0][0] == 1
