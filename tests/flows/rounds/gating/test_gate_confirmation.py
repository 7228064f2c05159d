"""The confirmation set on a real store and the real tiny model: pinned apart from the gating set, evaluated (greedy, by
the real engine) for a promoted checkpoint, its pass@1 stored and shown; a second call reuses it. Whether the round
reads it only on promotion is tests/flows/rounds/test_round.py's end-to-end campaign."""

import json

from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.flows.rounds.campaign import gate, prepare_campaign, start_round
from ratchet.flows.rounds.gating.confirmation import confirm
from ratchet.loop.campaign.round_context import load_ctx
from ratchet.store.db import query
from tests.flows.rounds.gating.test_gate_replay import _base, config, evaluate_as, write_tasks


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
