"""A real campaign (Prefect flows, DuckDB file, transformers generation, SFT) on a tiny model."""

import json

import pytest

from ratchet.loop.campaign.round_context import load_ctx, save_config
from ratchet.loop.config import load_config
from ratchet.store.db import query

LINEAGE_CHECKS = {
    "trajectory without its checkpoint": "SELECT count(*) FROM trajectories t LEFT JOIN checkpoints c USING (checkpoint_id) WHERE c.checkpoint_id IS NULL",
    "trajectory without its prompt": "SELECT count(*) FROM trajectories t LEFT JOIN prompts p USING (prompt_id) WHERE p.prompt_id IS NULL",
    "verdict without its trajectory": "SELECT count(*) FROM verdicts v LEFT JOIN trajectories t USING (trajectory_id) WHERE t.trajectory_id IS NULL",
    "training example not a verified-correct train rollout of its round": """
        SELECT count(*) FROM training_examples te JOIN training_runs tr USING (training_run_id)
        JOIN trajectories t USING (trajectory_id) JOIN prompts p USING (prompt_id)
        WHERE NOT (t.round_id = tr.round_id AND t.purpose = 'rollout' AND p.split = 'train'
                   AND EXISTS (SELECT 1 FROM verdicts v WHERE v.trajectory_id = t.trajectory_id AND v.correct))""",
    "held-out prompt in training_examples": """
        SELECT count(*) FROM training_examples JOIN trajectories USING (trajectory_id) JOIN prompts USING (prompt_id)
        WHERE split = 'heldout'""",
    "checkpoint whose parent is missing": "SELECT count(*) FROM checkpoints c WHERE parent_id IS NOT NULL AND parent_id NOT IN (SELECT checkpoint_id FROM checkpoints)",
    "training run whose output checkpoint is missing": "SELECT count(*) FROM training_runs WHERE output_checkpoint_id NOT IN (SELECT checkpoint_id FROM checkpoints)",
}

TABLES = [
    "campaigns",
    "rounds",
    "checkpoints",
    "prompts",
    "trajectories",
    "verdicts",
    "training_runs",
    "training_examples",
    "evaluations",
    "gate_decisions",
]


def assert_lineage(db):
    for what, sql in LINEAGE_CHECKS.items():
        assert query(db, sql)[1][0][0] == 0, what


def counts(db):
    return {t: query(db, f"SELECT count(*) FROM {t}")[1][0][0] for t in TABLES}


def write_sum_tasks(folder):
    """``folder/tasks.jsonl``: the 64 sums ``a + b`` (1..8 each) the tiny-model round tests train and evaluate on."""
    tasks = folder / "tasks.jsonl"
    lines = [{"question": f"What is {a} + {b}?", "answer": str(a + b)} for a in range(1, 9) for b in range(1, 9)]
    tasks.write_text("\n".join(json.dumps(x) for x in lines))
    return tasks


@pytest.fixture
def tiny_config(tmp_path, tiny_model_dir):
    tasks = write_sum_tasks(tmp_path)
    cfg = load_config(
        None,
        **{
            "db": str(tmp_path / "r.duckdb"),
            "campaign": "tiny",
            "max_rounds": 2,
            "model.name_or_path": str(tiny_model_dir),
            "tasks.source": "jsonl",
            "tasks.path": str(tasks),
            "tasks.heldout_fraction": 0.3,
            "tasks.fewshot": 0,
            "tasks.system_prompt": "sys",
            "tasks.train_prompts_per_round": 12,
            "tasks.heldout_prompts": 10,
            "generation.group_size": 2,
            "generation.max_new_tokens": 6,
            "generation.temperature": 0.7,
            "sft.epochs": 1,
            "sft.lr": 1e-4,
            "eval.num_samples": 2,
            "eval.ks": [1, 2],
            "gate.max_consecutive_rejections": 3,
        },
    )
    return save_config(cfg)


def test_campaign_end_to_end_lineage_and_idempotent_rerun(prefect_harness, tiny_config):
    from ratchet.flows.rounds.campaign import run_campaign
    from ratchet.loop.config import RatchetConfig

    cfg = load_ctx(tiny_config).cfg  # with the pass@k guard on its 2 eval samples per prompt, and a confirmation set
    gate = {**cfg.gate.model_dump(), "pass_at_k": 2, "confirmation_prompts": 5}
    tiny_config = save_config(RatchetConfig.model_validate({**cfg.model_dump(), "gate": gate}))
    decisions = run_campaign(tiny_config)
    ctx = load_ctx(tiny_config)
    db = ctx.db
    assert [d["round"] for d in decisions] == [1, 2]
    assert all(d["decision"] in ("promote", "reject", "halt", "no_candidate") for d in decisions)
    guarded = query(db, "SELECT s.pass_at_k, s.incumbent_pass_at_k, s.pass_at_k_lower_bound, g.decision, g.reason "
                        "FROM gate_set_decisions s JOIN gate_decisions g USING (round_id)")[1]  # fmt: skip
    assert guarded and all(k == 2 and 0 <= inc <= 1 and lb is not None for k, inc, lb, _, _ in guarded)
    assert all("pass@2" in reason for *_, d, reason in guarded if d == "promote")
    # The confirmation set is read only on promotion: 5 greedy completions per promoted candidate, its pass@1 stored.
    confirmed = query(db, "SELECT decision, confirmed_pass1 FROM gate_decisions")[1]
    assert all((d == "promote") == (p is not None) for d, p in confirmed), confirmed
    conf_trajs = query(db, "SELECT count(*) FROM trajectories WHERE eval_set_id IN "
                           "(SELECT confirmation_eval_set_id FROM gate_decisions)")[1][0][0]  # fmt: skip
    assert conf_trajs == 5 * sum(d == "promote" for d, _ in confirmed)
    assert query(db, "SELECT count(*) FROM confirmation_prompts")[1][0][0] == (5 if conf_trajs else 0)
    c = counts(db)
    assert c["rounds"] == 2 and c["gate_decisions"] == 2 and c["training_runs"] >= 1
    gating_evals = c["evaluations"] - conf_trajs // 5  # one confirmation/pass@1 row per promotion
    assert c["trajectories"] == 2 * 12 * 2 + gating_evals // 8 * 10 * 3 + conf_trajs  # rollouts + (greedy + 2 samples) per ckpt
    assert_lineage(db)
    # The base is evaluated once and reused by round 2 when round 1 was rejected.
    evals = query(db, "SELECT checkpoint_id, count(*) FROM evaluations WHERE metric = 'heldout/pass@1' GROUP BY ALL")[1]
    assert all(n == 1 for _, n in evals)
    assert {m for (m,) in query(db, "SELECT DISTINCT metric FROM evaluations")[1]} - {"confirmation/pass@1"} == {
        "heldout/pass@1",
        "heldout/no_answer_rate",
        "heldout/sampled_pass@1",
        "heldout/sampled_pass@2",
        "heldout/maj@1",
        "heldout/maj@2",
        "heldout/best_of_n@1",
        "heldout/best_of_n@2",
    }
    # Verifier monitoring per round and task.
    assert query(db, "SELECT count(*) FROM round_verifier_stats WHERE purpose = 'rollout'")[1][0][0] >= 2
    # Each round published its metrics, verifier statistics and gate decision as Prefect artifacts.
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    keys = [f"tiny-round-{r}-{k}" for r in (1, 2) for k in ("metrics", "verifier", "gate")]
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)))
    assert {a.key for a in arts} == set(keys)
    gate_md = next(a for a in arts if a.key == "tiny-round-1-gate").data
    assert decisions[0]["decision"] in gate_md and "held-out pass@1" in gate_md
    # Run again: nothing new, nothing duplicated.
    assert run_campaign(tiny_config) == decisions
    assert counts(db) == c


def test_stage_tasks_resume_from_markers(prefect_harness, tiny_config):
    """A crashed round resumes: a finished stage is not recomputed and its ingest is not duplicated."""
    from ratchet.flows.rounds.campaign import prepare_campaign, start_round
    from ratchet.flows.rounds.stages.pipeline import generate, verify
    from ratchet.flows.rounds.stages.round_engine import round_engine

    prepare_campaign.fn(str(tiny_config))
    incumbent = start_round.fn(str(tiny_config), 1)
    with round_engine(load_ctx(tiny_config, 1), incumbent) as engine:
        first = generate.fn(str(tiny_config), 1, 0, None, engine)
    marker = (load_ctx(tiny_config, 1).stage_dir("generate") / "_SUCCESS.json").read_text()
    again = generate.fn(str(tiny_config), 1, 0, None, None)  # done: nothing to sample
    assert first == again
    assert (load_ctx(tiny_config, 1).stage_dir("generate") / "_SUCCESS.json").read_text() == marker
    verify.fn(str(tiny_config), 1)
    verify.fn(str(tiny_config), 1)
    db = load_ctx(tiny_config).db
    assert query(db, "SELECT count(*) FROM trajectories")[1][0][0] == 24
    assert query(db, "SELECT count(*) FROM verdicts")[1][0][0] == 24


def test_campaign_with_changed_settings_is_refused(prefect_harness, tiny_config, tiny_model_dir):
    from ratchet.flows.rounds.campaign import prepare_campaign
    from ratchet.flows.rounds.state.identity import CampaignConflict

    prepare_campaign.fn(str(tiny_config))
    cfg = load_ctx(tiny_config).cfg
    other = save_config(cfg.model_copy(update={"sft": cfg.sft.model_copy(update={"lr": 0.5})}))
    with pytest.raises(CampaignConflict, match="different settings .*sft"):
        prepare_campaign.fn(str(other))


# GRPO consumes wrong completions too (negative advantages), so only these lineage checks apply to it.
GRPO_LINEAGE = (
    "trajectory without its checkpoint",
    "verdict without its trajectory",
    "held-out prompt in training_examples",
    "training run whose output checkpoint is missing",
)


def run_grpo_campaign(tiny_config, campaign: str, **grpo):
    """One GRPO round of the tiny campaign with these grpo settings (every group kept); returns (decisions, round-1 ctx)."""
    from ratchet.flows.rounds.campaign import run_campaign

    cfg = load_ctx(tiny_config).cfg
    path = save_config(
        cfg.model_copy(
            update={
                "campaign": campaign,
                "algorithm": "grpo",
                "max_rounds": 1,
                "grpo": cfg.grpo.model_copy(update={"dynamic_sampling": False, **grpo}),
            }
        )
    )
    return run_campaign(path), load_ctx(path, 1)


def test_grpo_round_trains_on_whole_groups(prefect_harness, tiny_config):
    decisions, ctx = run_grpo_campaign(
        tiny_config, "tiny-grpo", mini_batch_size=12, micro_batch_size=6, lr=1e-4, ppo_epochs=2, steps_per_round=1
    )
    db = ctx.db
    assert decisions[0]["decision"] in ("promote", "reject", "halt", "no_candidate")
    ((algo, n, metrics),) = query(db, "SELECT algorithm, num_examples, metrics_json FROM training_runs")[1]
    m = json.loads(metrics)
    assert algo == "grpo" and n == 24 and len(m["steps"]) == 2 * 2  # ppo_epochs x (24 / 12) optimizer steps
    assert {"train/kl/mean", "train/entropy/mean", "train/clip/region_frac", "train/grad_norm"} <= set(m["steps"][0]) | set(m)
    for what in GRPO_LINEAGE:
        assert query(db, LINEAGE_CHECKS[what])[1][0][0] == 0, what


def test_grpo_round_with_on_policy_steps(prefect_harness, tiny_config):
    """steps_per_round = 3: each step samples its own prompts from the policy the previous step trained,
    every row carries its step, and the round's candidate is the last step's policy."""
    decisions, ctx = run_grpo_campaign(
        tiny_config, "tiny-steps", mini_batch_size=8, micro_batch_size=4, lr=1e-3, ppo_epochs=1, steps_per_round=3
    )
    db = ctx.db
    per_step = query(
        db,
        """SELECT step, count(*), count(DISTINCT prompt_id), count(DISTINCT checkpoint_id) FROM trajectories
                            WHERE purpose = 'rollout' GROUP BY step ORDER BY step""",
    )[1]
    assert per_step == [(0, 8, 4, 1), (1, 8, 4, 1), (2, 8, 4, 1)]  # 12 prompts / 3 steps, G = 2
    assert query(db, "SELECT count(DISTINCT prompt_id) FROM trajectories WHERE purpose = 'rollout'")[1][0][0] == 12
    runs = query(db, "SELECT step, input_checkpoint_id, output_checkpoint_id FROM training_runs ORDER BY step")[1]
    assert [r[0] for r in runs] == [0, 1, 2]
    # Step k+1 samples from (and trains) the checkpoint step k produced: a chain from the incumbent.
    sampled_by = dict(
        query(db, "SELECT step, any_value(checkpoint_id) FROM trajectories WHERE purpose = 'rollout' GROUP BY step")[1]
    )
    for (k, inp, out), (k2, inp2, _) in zip(runs, runs[1:]):
        assert inp2 == out and sampled_by[k2] == out
    assert query(db, "SELECT candidate_checkpoint_id FROM gate_decisions")[1][0][0] == runs[-1][2]
    assert decisions[0]["decision"] in ("promote", "reject", "halt", "no_candidate")
    assert not list(ctx.campaign_dir.rglob("optimizer.pt"))  # AdamW moments dropped once the round trained
    for what in GRPO_LINEAGE:
        assert query(db, LINEAGE_CHECKS[what])[1][0][0] == 0, what


# A person's read-only DuckDB connection on --db, held (and queried) until the stop file exists.
HOLD_READER = """
import json, sys, time
from pathlib import Path
import duckdb
db, stop, out = sys.argv[1:4]
errors, seen = [], []
con = duckdb.connect(db, read_only=True)
while not Path(stop).exists():
    try:
        seen.append(con.execute("SELECT count(*) FROM rounds WHERE status = 'completed'").fetchone()[0])
    except duckdb.Error as e:
        errors.append(str(e))
    time.sleep(0.2)
final = con.execute("SELECT round_index, decision FROM round_summary WHERE status = 'completed' ORDER BY 1").fetchall()
con.close()
Path(out).write_text(json.dumps({"errors": errors, "seen": seen, "final": final}))
"""


@pytest.mark.slow
def test_reader_held_open_through_a_campaign(prefect_harness, tiny_config, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from ratchet.flows.rounds.campaign import run_campaign
    from ratchet.store.db import init_db

    db = load_ctx(tiny_config).db
    init_db(db)
    stop, out = tmp_path / "stop", tmp_path / "reader.json"
    # From the store's folder: the catalog's views name paths relative to it.
    dbp = Path(db).resolve()
    p = subprocess.Popen([sys.executable, "-c", HOLD_READER, str(dbp), str(stop), str(out)], cwd=dbp.parent)
    try:
        decisions = run_campaign(tiny_config)  # both rounds run while the reader holds the file
    finally:
        stop.touch()
        p.wait(60)
    got = json.loads(out.read_text())
    assert got["errors"] == [] and len(got["seen"]) > 5
    assert got["seen"][0] == 0 and got["seen"][-1] == 2  # the held connection saw the rounds complete
    assert [r[0] for r in got["final"]] == [1, 2]
    assert [r[1] for r in got["final"]] == [d["decision"] for d in decisions]


@pytest.mark.slow
def test_runs_of_one_round_halt_resume_manifest_and_export(prefect_harness, tiny_config, tmp_path):
    """A scheduled run does its rounds and stops; a person's halt stops the next run, resume lifts it;
    each round has a manifest; `ratchet export --format hf` loads with the store's row count."""
    from datasets import load_from_disk
    from typer.testing import CliRunner

    from ratchet.flows.cli import app
    from ratchet.flows.rounds.campaign import run_campaign

    runner = CliRunner()
    db = str(load_ctx(tiny_config).db)
    assert [d["round"] for d in run_campaign(tiny_config, rounds=1)] == [1]
    r = runner.invoke(app, ["campaign", "halt", "tiny", "--reason", "looking at round 1", "--db", db])
    assert r.exit_code == 0 and "halt recorded" in r.stdout
    assert [d["round"] for d in run_campaign(tiny_config, rounds=1)] == [1]  # halted: no round 2
    doc = json.loads(runner.invoke(app, ["status", "--db", db, "--format", "json"]).stdout)["campaigns"][0]
    assert doc["rounds_done"] == 1 and doc["max_rounds"] == 2 and doc["not_running"].startswith("halted: looking at round 1")
    r = runner.invoke(app, ["campaign", "resume", "tiny", "--reason", "fine", "--db", db])
    assert r.exit_code == 0, r.output
    assert [d["round"] for d in run_campaign(tiny_config, rounds=1)] == [1, 2]
    doc = json.loads(runner.invoke(app, ["status", "--db", db, "--format", "json"]).stdout)["campaigns"][0]
    assert doc["not_running"] == "max reached" and [e["action"] for e in doc["events"]] == ["halt", "resume"]
    manifest = query(db, "SELECT round_id, python_version, versions_json, config_hash FROM round_manifests ORDER BY 1")[1]
    assert len(manifest) == 2 and json.loads(manifest[0][2])["torch"] and len(manifest[0][3]) == 64
    for what, sql in [
        ("rollouts", "SELECT count(*) FROM trajectories WHERE purpose = 'rollout' AND round_id LIKE '%-r2'"),
        (
            "training-set",
            "SELECT count(*) FROM training_examples JOIN training_runs USING (training_run_id) WHERE round_id LIKE '%-r2'",
        ),
    ]:
        out = tmp_path / f"{what}-hf"
        r = runner.invoke(
            app, ["export", "--db", db, "--campaign", "tiny", "--round", "2", "--what", what, "--format", "hf", "--out", str(out)]
        )
        assert r.exit_code == 0, r.output
        ds = load_from_disk(str(out))
        n = query(db, sql)[1][0][0]
        assert len(ds) == n and f"{n} rows" in r.stdout
        if n:
            assert ds[0]["messages"][0] == {"role": "system", "content": "sys"} and ds[0]["text"].endswith(ds[0]["completion"])
    r = runner.invoke(app, ["export", "--db", db, "--campaign", "nope", "--what", "rollouts", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "no campaign 'nope'" in r.stderr


@pytest.mark.slow
def test_a_spent_night_budget_stops_the_round_cleanly_and_the_next_run_resumes_it(prefect_harness, tiny_config):
    """[schedule] max_tokens = 1: the round stops after the incumbent's evaluation (status budget_spent, no gate
    decision); the next run, without the limit, resumes it, reusing that evaluation, and the gate decides."""
    from ratchet.flows.rounds.campaign import run_campaign
    from ratchet.loop.config import RatchetConfig

    cfg = load_ctx(tiny_config).cfg
    dump = {**cfg.model_dump(), "max_rounds": 1}
    tight = save_config(RatchetConfig.model_validate({**dump, "schedule": {**dump["schedule"], "max_tokens": 1}}))
    (first,) = run_campaign(tight)
    db = load_ctx(tight).db
    assert first["decision"] == "budget_spent" and "schedule.max_tokens 1" in first["reason"], first
    assert query(db, "SELECT status FROM rounds")[1] == [("budget_spent",)]
    assert query(db, "SELECT count(*) FROM gate_decisions")[1][0][0] == 0
    base_evals = query(db, "SELECT count(*) FROM trajectories WHERE purpose LIKE 'eval%'")[1][0][0]
    assert base_evals == 10 * 3  # the incumbent's greedy + 2 samples on the 10 held-out prompts, kept
    (second,) = run_campaign(save_config(RatchetConfig.model_validate(dump)))
    assert second["decision"] in ("promote", "reject", "halt", "no_candidate")
    assert query(db, "SELECT status FROM rounds")[1] == [("completed",)]
    ((base, n),) = query(db, "SELECT count(*), count(DISTINCT trajectory_id) FROM trajectories t JOIN rounds r USING (round_id) "
                             "WHERE purpose LIKE 'eval%' AND t.checkpoint_id = r.incumbent_checkpoint_id")[1]  # fmt: skip
    assert base == n == base_evals  # not evaluated again
