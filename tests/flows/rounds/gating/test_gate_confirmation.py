"""The confirmation set on a real store and the real tiny model: pinned apart from the gating set, evaluated (greedy, by
the real engine) for a promoted checkpoint, its pass@1 stored and shown; a second call reuses it. Per [[evals]] set
(outcomes written as store rows, no model): each set's own slice, stored and shown per set. Whether the round reads it
only on promotion is tests/flows/rounds/test_round.py's end-to-end campaign."""

import json
import re

from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.flows.cli.common import console
from ratchet.flows.cli.running.run_commands import print_rounds
from ratchet.flows.rounds.campaign import gate, prepare_campaign, start_round
from ratchet.flows.rounds.gating.confirmation import _record, confirm, confirmation_eval_set_id, confirmation_set
from ratchet.loop.campaign.round_context import load_ctx
from ratchet.store.db import query, transaction
from tests.flows.rounds.gating.test_gate_replay import _base, config, evaluate_as, run_round, write_tasks


def test_a_promoted_checkpoint_is_read_on_its_confirmation_set(tmp_path, tiny_model_dir):
    tasks = write_tasks(tmp_path, "sums", 1, 31)
    over = {"tasks.source": "jsonl", "tasks.path": str(tasks), "tasks.heldout_prompts": 200, "gate.confirmation_prompts": 6,
            "generation.max_new_tokens": 4}  # fmt: skip
    path = config(tmp_path, tiny_model_dir, **over)
    prepare_campaign.fn(str(path))
    ctx = load_ctx(path)
    base = _base(ctx)
    evaluate_as(path, 1, base, lambda i, p: i < 100)
    inc = start_round.fn(str(path), 1)
    assert gate.fn(str(path), 1, inc, base)["decision"] == "promote"  # a candidate equal to its incumbent
    pass1 = confirm.fn(str(path), 1, base)
    db = ctx.db
    ((stored, es),) = query(db, "SELECT confirmed_pass1, confirmation_eval_set_id FROM gate_decisions")[1]
    assert stored == pass1 and 0.0 <= pass1 <= 1.0
    conf = {p for (p,) in query(db, "SELECT prompt_id FROM confirmation_prompts")[1]}
    assert len(conf) == 6 and not conf & {p.prompt_id for p in ctx.heldout()}  # never a gating prompt
    assert {
        s for (s,) in query(db, "SELECT split FROM prompts WHERE prompt_id IN (SELECT prompt_id FROM confirmation_prompts)")[1]
    } == {"heldout"}
    n = query(db, "SELECT count(*) FROM trajectories WHERE eval_set_id = ? AND checkpoint_id = ?", [es, base])[1][0][0]
    assert n == 6
    assert confirm.fn(str(path), 1, base) == pass1  # resumed: reused, nothing duplicated
    assert query(db, "SELECT count(*) FROM trajectories WHERE eval_set_id = ?", [es])[1][0][0] == 6
    r = CliRunner().invoke(app, ["status", "--db", str(db), "--format", "json"])
    assert json.loads(r.stdout)["campaigns"][0]["rounds"][0]["confirmed_pass1"] == pass1


def test_each_eval_set_gets_its_own_confirmation_slice_stored_and_shown_per_set(tmp_path, tiny_model_dir):
    sources = [
        {"path": str(write_tasks(tmp_path, "alpha", 1, 31)), "name": "alpha", "format": "math"},
        {"path": str(write_tasks(tmp_path, "beta", 31, 61)), "name": "beta", "format": "math"},
    ]
    evals = [{"name": "alpha", "source": "alpha", "prompts": 60, "confirmation_prompts": 20},
             {"name": "beta", "source": "beta", "prompts": 60}]  # fmt: skip
    path = config(tmp_path, tiny_model_dir, **{"tasks.sources": sources, "evals": evals, "gate.confirmation_prompts": 10})
    prepare_campaign.fn(str(path))
    ctx = load_ctx(path)
    evaluate_as(path, 1, _base(ctx), lambda i, p: i % 2 == 0)
    assert run_round(path, 1, lambda i, p: True)["decision"] == "promote"
    ctx = load_ctx(path, 1)
    with transaction(ctx.db) as con:
        named = confirmation_set(con, ctx)
    by = {n: [p for m, p in named if m == n] for n in ("alpha", "beta")}
    assert {n: len(ps) for n, ps in by.items()} == {"alpha": 20, "beta": 10}  # its own setting, else the gate's
    assert all(p.source == n and p.split == "heldout" for n, ps in by.items() for p in ps)  # from the set's own reserve
    assert not {p.prompt_id for _, p in named} & {p.prompt_id for p in ctx.heldout()}
    with transaction(ctx.db) as con:
        assert confirmation_set(con, ctx) == named  # pinned: read back, not drawn again
    # cand1's greedy outcomes on the slices: alpha 15 of 20 right, beta 4 of 10
    prompts = [p for _, p in named]
    es = confirmation_eval_set_id(ctx, prompts)
    evaluate_as(path, 1, "cand1", lambda i, p: i < 15 or 20 <= i < 24, prompts=prompts, eval_set_id=es)
    with transaction(ctx.db) as con:
        got = _record(con, ctx, "cand1", es, named)
    assert got == {"pass1": 19 / 30, "sets": {"alpha": 0.75, "beta": 0.4}}
    db = ctx.db
    rows = query(db, "SELECT eval_name, candidate_pass1, confirmed_pass1 FROM gate_set_decisions ORDER BY eval_name")[1]
    assert rows == [("alpha", 1.0, 0.75), ("beta", 1.0, 0.4)]
    assert query(db, "SELECT confirmed_pass1 FROM gate_decisions")[1] == [(19 / 30,)]
    metrics = dict(query(db, "SELECT metric, value FROM evaluations WHERE eval_set_id = ?", [es])[1])
    assert metrics == {"confirmation/pass@1": 19 / 30, "confirmation/alpha/pass@1": 0.75, "confirmation/beta/pass@1": 0.4}
    r = CliRunner().invoke(app, ["status", "--db", str(db), "--format", "json"])
    shown = json.loads(r.stdout)["campaigns"][0]["rounds"][0]["confirmed_sets"]
    assert shown == {
        "alpha": {"candidate_pass1": 1.0, "confirmed_pass1": 0.75},
        "beta": {"candidate_pass1": 1.0, "confirmed_pass1": 0.4},
    }
    table = " ".join(CliRunner().invoke(app, ["status", "--db", str(db)]).stdout.split())  # wrapped at the console's width
    assert "round 1 confirmed pass@1 per set: alpha 0.750 (gating 1.000), beta 0.400 (gating 1.000)" in table
    with console.capture() as cap:  # the table `ratchet run` / `demo` end with: the confirmed column beside the gating one
        print_rounds(str(db), "gated")
    assert "confi" in cap.get() and re.search(r"cand1\W+1\.000\W+0\.633\W", cap.get())  # headers cut at 80 columns
    out = tmp_path / "report.html"
    assert CliRunner().invoke(app, ["report", "--db", str(db), "--out", str(out)]).exit_code == 0
    html = out.read_text()
    assert re.search(
        r"<td>alpha</td><td>gate</td><td class=\"num\">60</td>\s*<td[^>]*>[^<]*</td><td[^>]*>1\.000</td>\s*<td[^>]*>0\.750</td>",
        html,
    )
