"""The gate's reward-hacking monitors on a constructed store: the real gate stage measures them from stored completions
(Math-Verify as the second verifier), stores ``round_monitors``, halts with the tripped monitor's name, and
``ratchet gate replay`` backtests thresholds. Completions are store rows with chosen texts and verdicts (no model)."""

import json

from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.flows.report.triage import monitors_markdown
from ratchet.flows.rounds.campaign import gate, prepare_campaign, start_round
from ratchet.flows.rounds.gating.gate_replay import replay
from ratchet.loop.campaign.round_context import load_ctx, now, short_hash
from ratchet.store.db import connect, query, transaction
from ratchet.store.ingest import insert_rows
from ratchet.verifiers.reward import VERSION
from tests.flows.report.test_report import page_text
from tests.flows.rounds.gating.test_gate_replay import _base, config, write_tasks


def store_eval(path, round_index, checkpoint, change=lambda i, p, row: None):
    """Greedy evaluations of ``checkpoint``: right on the first 100 of 200 prompts, 10 tokens, 'Answer: <gold>' (else
    gold + 1, unformatted); ``change(i, prompt, row)`` edits a row (keys of both the trajectory and the verdict)."""
    ctx = load_ctx(path, round_index)
    es, ts = ctx.eval_set_id(), now()
    trajs, verdicts = [], []
    for i, p in enumerate(ctx.heldout()):
        ok = i < 100
        said = p.answer if ok else str(int(p.answer) + 1)
        row = dict(completion=f"The sum is {said}. Answer: {said}", completion_tokens=10, finish_reason="stop", correct=ok,
                   reason="correct" if ok else "wrong_answer", parsed=said, format_ok=ok)  # fmt: skip
        change(i, p, row)
        tid = short_hash(es, p.prompt_id, checkpoint, "eval_greedy", 0)
        trajs.append(dict(trajectory_id=tid, round_id=ctx.round_id, prompt_id=p.prompt_id, checkpoint_id=checkpoint,
                          purpose="eval_greedy", eval_set_id=es, sample_index=0, completion=row["completion"],
                          prompt_tokens=1, completion_tokens=row["completion_tokens"], finish_reason=row["finish_reason"],
                          backend="transformers", temperature=0.0, top_p=1.0, max_new_tokens=64, seed=0, created_at=ts))  # fmt: skip
        verdicts.append(dict(trajectory_id=tid, verifier="math", verifier_version=VERSION, reward=float(row["correct"]),
                             correct=row["correct"], reason=row["reason"], parsed=row["parsed"], format_ok=row["format_ok"],
                             latency_s=0.0, created_at=ts))  # fmt: skip
    with transaction(ctx.db) as con:
        insert_rows(con, "checkpoints", [dict(checkpoint_id=checkpoint, parent_id=None, training_run_id=None, model_ref="x",
                                              path=None, created_at=ts)])  # fmt: skip
        insert_rows(con, "trajectories", trajs)
        insert_rows(con, "verdicts", verdicts)


def _set(**kv):
    return lambda i, p, row: row.update({k: f(i, p, row) for k, f in kv.items()})


# One candidate per monitor, each as accurate as its incumbent (the base) but for what its monitor watches.
HACKS = {
    "length_p90_ratio": _set(completion_tokens=lambda i, p, r: 40 if i % 5 == 0 else 10),
    "truncation_rate": _set(finish_reason=lambda i, p, r: "length" if i % 5 == 0 else "stop"),
    "format_without_correct": _set(format_ok=lambda i, p, r: True),
    "no_answer_rate": _set(reason=lambda i, p, r: "no_answer" if i >= 150 else r["reason"]),
    "same_answer_share": _set(parsed=lambda i, p, r: "7" if i >= 100 else r["parsed"]),
    "language_mixing": _set(completion=lambda i, p, r: "答案是这个数字 " + r["completion"] if i % 10 == 0 else r["completion"]),
    # our verdict says wrong where the text gives the gold: Math-Verify disagrees on 30% of prompts
    "cross_check_disagreement": _set(
        completion=lambda i, p, r: f"Answer: {p.answer}" if 100 <= i < 160 else r["completion"],
    ),
}


def test_each_monitor_halts_by_name_is_stored_and_replays(tmp_path, tiny_model_dir):
    tasks = write_tasks(tmp_path, "sums", 1, 31)
    over = {
        "tasks.source": "jsonl",
        "tasks.path": str(tasks),
        "tasks.heldout_prompts": 200,
        "verifier.cross_check": "math_verify",
    }
    path = config(tmp_path, tiny_model_dir, **over)
    prepare_campaign.fn(str(path))
    ctx = load_ctx(path)
    store_eval(path, 1, _base(ctx))
    for r, (name, hack) in enumerate(HACKS.items(), start=1):
        inc = start_round.fn(str(path), r)
        store_eval(path, r, f"cand{r}", hack)
        d = gate.fn(str(path), r, inc, f"cand{r}")
        assert d["decision"] == "halt" and d["reason"].startswith(f"monitor {name}: "), (name, d)
        assert "; monitor" not in d["reason"], d  # only its own monitor tripped
    out = CliRunner().invoke(
        app, ["sql", "--db", str(ctx.db), "--format", "json",
              "SELECT monitor, count(*) AS n, count(*) FILTER (WHERE tripped) AS tripped FROM round_monitors GROUP BY monitor"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    got = {r["monitor"]: (r["n"], r["tripped"]) for r in json.loads(out.stdout)}
    assert got == {**{m: (7, 1) for m in HACKS}, "length_mean_ratio": (7, 0)}
    ((value, threshold, reference),) = query(
        ctx.db,
        "SELECT value, threshold, reference FROM round_monitors m JOIN rounds USING (round_id) "
        "WHERE round_index = 2 AND monitor = 'truncation_rate'",
    )[1]
    assert (value, threshold, reference) == (0.2, 0.1, "incumbent")
    # Replay reproduces the halts; a looser truncation threshold backtests round 2 as a promotion.
    same = replay(ctx.db, "gated")
    assert not any(r["changed"] for r in same) and [r["monitors_tripped"] for r in same] == [[m] for m in HACKS]
    loose = replay(ctx.db, "gated", {"gate.monitors.truncation_rate": 0.5, "gate.monitors.cross_check_disagreement": 0.5})
    assert [r["round"] for r in loose if r["changed"]] == [2, 7] and loose[1]["replayed"] == "promote"
    # The gate artifact's and the report's monitors tables.
    with connect(ctx.db, read_only=True) as con:
        md = monitors_markdown(con, load_ctx(path, 2).round_id)
    assert "| truncation_rate | 0.200 | 0.000 (incumbent) | 0.200 | 0.100 | **yes** |" in md
    out = tmp_path / "report.html"
    assert CliRunner().invoke(app, ["report", "--db", str(ctx.db), "--out", str(out)]).exit_code == 0
    assert "truncation_rate 0.200 0.000 (incumbent) 0.200 0.100 yes" in page_text(out.read_text())
