"""The sequential gate and the drift check in the round's gate stage, on a real store, and `ratchet gate replay` of them.

As in test_gate_replay.py, evaluations are written as store rows with chosen per-prompt verdicts (no model calls for
the decision tests); the campaign, its rounds and its pinned eval set come from the real round tasks. The last test
runs the real evaluate stage on the tiny model, look by look.
"""

import json

from ratchet.flows.report.render import drift_plot
from ratchet.flows.rounds.campaign import prepare_campaign
from ratchet.flows.rounds.gating.gate_replay import replay
from ratchet.loop.campaign.round_context import load_ctx
from ratchet.store.db import connect, query
from ratchet.store.read.reports import drift_history
from tests.flows.rounds.gating.test_gate_replay import _base, config, evaluate_as, run_round, write_tasks

SEQ = {"gate.sequential": True, "gate.sequential_batch_prompts": 100, "gate.max_eval_prompts": 400}


def test_sequential_gate_stops_when_a_bound_decides_and_records_why(tmp_path, smollm2_dir):
    tasks = write_tasks(tmp_path, "sums", 1, 61)
    path = config(
        tmp_path, smollm2_dir, **{"tasks.source": "jsonl", "tasks.path": str(tasks), "tasks.heldout_prompts": 400}, **SEQ
    )
    prepare_campaign.fn(str(path))
    ctx = load_ctx(path)
    evaluate_as(path, 1, _base(ctx), lambda i, p: i < 200)
    decisions = [
        run_round(path, 1, lambda i, p: i < 280),  # +20 points, nothing lost: shown at the first look
        run_round(path, 2, lambda i, p: (i < 280 and not 260 <= i < 280) or 280 <= i < 300),  # 20 lost, 20 gained
        run_round(path, 3, lambda i, p: i < 200),  # -20 points: shown worse early
    ]
    assert [d["decision"] for d in decisions] == ["promote", "reject", "reject"]
    rows = query(ctx.db, """SELECT eval_prompts_used, sequential_looks, sequential_stop, reason FROM gate_decisions g
                            JOIN rounds r USING (round_id) ORDER BY r.round_index""")[1]  # fmt: skip
    assert [r[:3] for r in rows[:2]] == [(100, 1, "promoted"), (400, 4, "max_prompts")]
    assert rows[2][2] == "futile" and rows[2][0] < 400
    assert "sequential: stopped after 100 of up to 400 prompts" in rows[0][3]
    sets = query(ctx.db, "SELECT num_prompts FROM gate_set_decisions g JOIN rounds r USING (round_id) ORDER BY r.round_index")[1]
    assert [n for (n,) in sets][:2] == [100, 400]
    # replay walks the same looks on the stored outcomes; the fixed-size rule on all 400 decides round 3 the same
    same = replay(ctx.db, "gated")
    assert [r["replayed"] for r in same] == ["promote", "reject", "reject"] and not any(r["changed"] for r in same)
    fixed = replay(ctx.db, "gated", {"gate.sequential": False})
    assert [r["replayed"] for r in fixed][0::2] == ["promote", "reject"] and "sequential" not in fixed[0]["reason"]


def test_drift_from_the_base_on_a_guard_set_halts_a_promotion(tmp_path, smollm2_dir):
    main = write_tasks(tmp_path, "alpha", 1, 31)
    canary = write_tasks(tmp_path, "beta", 31, 61)
    path = config(
        tmp_path, smollm2_dir,
        **{"tasks.sources": [{"path": str(main), "name": "alpha", "format": "math"}], "gate.max_drift": 0.0,
           "evals": [{"name": "main", "source": "alpha", "prompts": 200},
                     {"name": "canary", "file": {"path": str(canary), "format": "math"}, "prompts": 200, "role": "guard"}]},
    )  # fmt: skip
    prepare_campaign.fn(str(path))
    ctx = load_ctx(path)
    names = {p.prompt_id: n for n, ps in ctx.tasks.eval_sets(ctx.cfg) for p in ps}
    pos = {p.prompt_id: i for i, p in enumerate(ctx.heldout())}
    canary_ids = sorted((pos[p] for p, n in names.items() if n == "canary"))
    lost = set(canary_ids[:8])  # 8 of the canary's solved prompts lost: not shown vs the incumbent, shown vs base at 0
    evaluate_as(path, 1, _base(ctx), lambda i, p: names[p.prompt_id] == "canary" or i % 2 == 0)
    d = run_round(path, 1, lambda i, p: (names[p.prompt_id] == "main") or i not in lost)
    assert d["decision"] == "halt" and d["reason"].startswith("drift: on canary (200 prompts")
    row = query(ctx.db, "SELECT drift, drift_upper_bound, drift_set FROM gate_decisions")[1][0]
    assert round(row[0], 9) == -0.04 and row[1] < 0 and row[2] == "canary"
    bases = dict(query(ctx.db, "SELECT eval_name, base_pass1 FROM gate_set_decisions")[1])
    assert bases == {"main": 0.5, "canary": 1.0}
    passed = dict(query(ctx.db, "SELECT eval_name, passed FROM gate_set_decisions")[1])
    assert passed == {"main": True, "canary": True}  # the guard (vs the incumbent) passed; the drift check halted
    with connect(ctx.db, read_only=True) as con:  # the report's drift curve
        hist = {h["eval_name"]: h for h in drift_history(con, "gated")}
        png = drift_plot(con, "gated")
    assert round(hist["canary"]["change"], 9) == -0.04 and hist["canary"]["max_drift"] == 0.0 and hist["main"]["change"] > 0
    assert hist["canary"]["drift_upper_bound"] == row[1] and hist["main"]["drift_upper_bound"] is None
    assert png.startswith(b"\x89PNG")
    assert replay(ctx.db, "gated")[0]["replayed"] == "halt"
    assert replay(ctx.db, "gated", {"gate.max_drift": None})[0]["replayed"] == "promote"


def test_sequential_evaluation_computes_each_prompt_once(prefect_harness, tmp_path, tiny_model_dir):
    """The real evaluate stage on the tiny model: the incumbent is evaluated look by look on only the prompts it lacks,
    and a second round with the same incumbent evaluates it on nothing new."""
    from ratchet.flows.rounds.campaign import gate, start_round
    from ratchet.flows.rounds.gating.sequential_eval import evaluate_sequentially
    from ratchet.flows.rounds.stages.round_engine import round_engine

    tasks = write_tasks(tmp_path, "sums", 1, 4)
    seq = {"gate.sequential": True, "gate.sequential_batch_prompts": 4, "gate.max_eval_prompts": 8}
    path = config(tmp_path, tiny_model_dir, **{"tasks.source": "jsonl", "tasks.path": str(tasks), "tasks.heldout_prompts": 10,
                                               "generation.max_new_tokens": 4}, **seq)  # fmt: skip
    prepare_campaign.fn(str(path))
    ctx = load_ctx(path)
    base = _base(ctx)
    greedy = "SELECT count(*) FROM trajectories WHERE checkpoint_id = ? AND purpose = 'eval_greedy'"
    for r in (1, 2):
        inc = start_round.fn(str(path), r)
        evaluate_as(path, r, f"cand{r}", lambda i, p: True)  # the candidate's outcomes on every prompt, stored
        with round_engine(load_ctx(path, r), inc) as engine:  # the round's engine, on the incumbent
            seq_gate = evaluate_sequentially(str(path), r, inc, f"cand{r}", engine)
        assert (seq_gate.prompts_used, seq_gate.looks, seq_gate.stop) == (8, 2, "max_prompts")  # 8 prompts decide nothing
        assert query(ctx.db, greedy, [base])[1][0][0] == 8  # 4 + 4 prompts, once
        assert gate.fn(str(path), r, inc, f"cand{r}")["decision"] == "reject"
    ids = query(ctx.db, "SELECT prompt_id FROM trajectories WHERE checkpoint_id = ? ORDER BY prompt_id", [base])[1]
    assert [i for (i,) in ids] == sorted(p.prompt_id for p in ctx.heldout())[:8]  # the first 8 of 10 in id order
    assert json.loads(query(ctx.db, "SELECT settings_json FROM gate_decisions LIMIT 1")[1][0][0])["sequential"] is True
    secs = query(ctx.db, "SELECT stage_seconds_json FROM rounds ORDER BY round_index")[1]
    first, second = (json.loads(x)["evaluate"] for (x,) in secs)
    assert first > 0 and second == 0  # round 1's looks generated (their compute is counted); round 2's had nothing to do


def test_preflight_warns_when_the_sequential_gate_cannot_reach_its_maximum():
    from ratchet.flows.rounds.gating.sequential_eval import sequential_warning
    from ratchet.loop.config import RatchetConfig

    cfg = RatchetConfig(gate={"sequential": True, "max_eval_prompts": 1000})
    assert "stops at 400" in sequential_warning(cfg, 400) and sequential_warning(cfg, 1000) is None
