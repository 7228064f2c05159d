"""A scripted 2-turn environment through one real round of the tiny model (``run_campaign``): every rollout and
evaluation is a 2-turn episode, its stored token stream and mask agree with the tokenizer's chat template, its score()
judged them, RFT trained on episodes, lineage holds and ``ratchet export`` gives each episode as chat messages."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ratchet.store.db import query

sys.path.insert(0, str(Path(__file__).parent))
from test_round import GRPO_LINEAGE, LINEAGE_CHECKS, assert_lineage  # noqa: E402

pytestmark = pytest.mark.slow

ENV = '''
class Recheck:
    """Asks the model to check its answer once; the episode then ends at max_turns = 2."""

    version = "1"

    def reset(self, record):
        return None

    def step(self, messages):
        return {"role": "user", "content": "Check it and answer again."}

    def score(self, messages, record):  # the whole episode judged: both turns must give the gold
        said = [m["content"].strip() for m in messages if m["role"] == "assistant"]
        return len(said) == 2 and all(s == "Answer: " + record["answer"] for s in said)
'''


def _config(tmp: Path, model: Path, algorithm: str) -> Path:
    tasks = tmp / "sums.jsonl"
    recs = [{"question": f"What is {a} + {b}?", "answer": str(a + b)} for a in range(1, 9) for b in range(1, 9)]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in recs))
    (tmp / "recheck_env.py").write_text(ENV)  # imported from the task file's folder
    cfg = tmp / "ratchet.toml"
    lines = [
        'campaign = "episodes"', "max_rounds = 1", f'algorithm = "{algorithm}"', f'db = "{tmp / "r.duckdb"}"', f'run_dir = "{tmp / "runs"}"',
        "[model]", f'name_or_path = "{model}"',
        "[tasks]", "train_prompts_per_round = 8", "heldout_prompts = 6", "heldout_fraction = 0.3",
        "[generation]", "group_size = 2", "max_new_tokens = 6", "temperature = 0.7",
        "[eval]", "num_samples = 0",
        "[sft]", "epochs = 1", "lr = 1e-4",
        "[grpo]", "dynamic_sampling = false", "steps_per_round = 1", "mini_batch_size = 16", "micro_batch_size = 8", "lr = 1e-4",
        "[[tasks.sources]]", 'name = "sums"', f'path = "{tasks}"', 'format = "math"', 'system_prompt = "sys"',
        'environment = "recheck_env:Recheck"', "max_turns = 2",
    ]  # fmt: skip
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


@pytest.mark.parametrize("algorithm", ["rft", "grpo"])
def test_two_turn_environment_through_one_round(prefect_harness, tiny_model_dir, tmp_path, algorithm):
    from transformers import AutoTokenizer

    from ratchet.flows.cli import app
    from ratchet.flows.rounds.campaign import run_campaign
    from ratchet.loop.campaign.round_context import save_config
    from ratchet.loop.config import load_config

    db = tmp_path / "r.duckdb"
    run_campaign(save_config(load_config(_config(tmp_path, tiny_model_dir, algorithm))), rounds=1)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    cols = "purpose, turns, prompt_messages, messages, completion, completion_token_ids, completion_mask, prompt_tokens, sampler_logprobs"
    rows = [dict(zip(cols.split(", "), r)) for r in query(db, f"SELECT {cols} FROM trajectories")[1]]
    assert {r["purpose"] for r in rows} == {"rollout", "eval_greedy"}
    for r in rows:
        assert r["turns"] == 2, r
        episode = json.loads(r["messages"])
        assert [m["role"] for m in episode] == ["assistant", "user", "assistant"] and episode[-1]["content"] == r["completion"]
        opening, ids, mask = json.loads(r["prompt_messages"]), list(r["completion_token_ids"]), list(r["completion_mask"])
        prompt = tok(tok.apply_chat_template(opening, tokenize=False, add_generation_prompt=True))["input_ids"]
        assert len(prompt) == r["prompt_tokens"] and len(mask) == len(ids)
        # the model's tokens are exactly its two turns' text (each with its end of turn when it stopped)
        model_text = tok.decode([t for t, m in zip(ids, mask) if m], skip_special_tokens=True)
        assert model_text == episode[0]["content"] + episode[2]["content"]
        env_text = tok.decode([t for t, m in zip(ids, mask) if not m])
        assert env_text.endswith("<|im_start|>user\nCheck it and answer again.<|im_end|>\n<|im_start|>assistant\n")
        full = tok.apply_chat_template([*opening, *episode], tokenize=False)
        assert full.startswith(tok.decode(prompt + ids))  # the stream is the template's rendering of the episode
        if algorithm == "grpo" and r["purpose"] == "rollout":  # the sampler's log-probs: on the model's tokens only
            lps = list(r["sampler_logprobs"])
            assert len(lps) == len(ids) and all(lp == 0.0 for lp, m in zip(lps, mask) if not m)
            assert all(lp <= 0.0 for lp in lps) and any(lp < 0.0 for lp, m in zip(lps, mask) if m)
    verifiers = query(db, "SELECT DISTINCT verifier FROM verdicts")[1]
    assert verifiers == [("plugin:recheck_env:Recheck",)]  # the environment's score() judged every episode
    ((version,),) = query(db, "SELECT DISTINCT verifier_version FROM verdicts")[1]
    assert "plugin:recheck_env:Recheck=1+" in version  # the environment's identity is the campaign's verifier version
    trained = query(db, "SELECT count(*) FROM training_examples")[1][0][0]
    assert trained > 0  # rft: the tiny model answers 7 on both turns, the sums of 7 are right; grpo: every group
    if algorithm == "rft":
        assert_lineage(db)
    else:  # GRPO consumes wrong episodes too (negative advantages)
        for what in GRPO_LINEAGE:
            assert query(db, LINEAGE_CHECKS[what])[1][0][0] == 0, what
        assert set(query(db, "SELECT algorithm FROM training_runs")[1]) == {("grpo",)}
    out = tmp_path / "rollouts.jsonl"
    r = CliRunner().invoke(app, ["export", "--db", str(db), "--campaign", "episodes", "--what", "rollouts", "--out", str(out)])
    assert r.exit_code == 0, r.output
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(exported) == sum(x["purpose"] == "rollout" for x in rows)
    for e in exported:
        assert e["turns"] == 2 and [m["role"] for m in e["messages"]][-4:] == ["user", "assistant", "user", "assistant"]
        assert e["messages"][-1]["content"] == e["completion"] and e["text"] == tok.apply_chat_template(
            e["messages"], tokenize=False
        )
