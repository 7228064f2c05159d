"""`ratchet export` writes the exact chat each trajectory was generated from (issue 24, finding 1).

One round of a ``[[tasks.sources]]`` campaign (its own system prompt and few-shot examples from the file) on the
tiny model; every exported row's ``messages`` without the final assistant turn, rendered with the chat template and
the generation prompt, has exactly the row's ``prompt_tokens`` tokens, and training read the same stored chat.
"""

import json

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.store.db import query

SYSTEM = "You are checking sums. End with 'Answer: N'."


@pytest.fixture
def sources_campaign(tmp_path, tiny_model_dir):
    tasks = tmp_path / "sums.jsonl"
    recs = [{"question": f"What is {a} + {b}?", "answer": str(a + b)} for a in range(1, 9) for b in range(1, 9)]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in recs))
    cfg = tmp_path / "ratchet.toml"
    cfg.write_text(
        "\n".join(
            [
                'campaign = "own"',
                "max_rounds = 1",
                f'db = "{tmp_path / "r.duckdb"}"',
                f'run_dir = "{tmp_path / "runs"}"',
                "[model]",
                f'name_or_path = "{tiny_model_dir}"',
                "[tasks]",
                "train_prompts_per_round = 12",
                "heldout_prompts = 8",
                "heldout_fraction = 0.3",
                "[generation]",
                "group_size = 2",
                "max_new_tokens = 6",
                "temperature = 0.7",
                "[sft]",
                "epochs = 1",
                "lr = 1e-4",
                "[[tasks.sources]]",
                'name = "sums"',
                f'path = "{tasks}"',
                'format = "math"',
                "fewshot = 2",
                f'system_prompt = "{SYSTEM}"',
            ]
        )  # fmt: skip
        + "\n"
    )
    return cfg, tmp_path / "r.duckdb"


def _export(db, what, out):
    r = CliRunner().invoke(
        app, ["export", "--db", str(db), "--campaign", "own", "--what", what, "--format", "jsonl", "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    return r, [json.loads(line) for line in out.read_text().splitlines()]


def _rendered_tokens(tok, row) -> int:
    assert row["messages"][-1] == {"role": "assistant", "content": row["completion"]}
    text = tok.apply_chat_template(row["messages"][:-1], tokenize=False, add_generation_prompt=True)
    return len(tok(text, add_special_tokens=False)["input_ids"])


@pytest.mark.filterwarnings("error:Arrow output:UserWarning")  # export reads through con.sql: no extra copy (issue 42)
def test_export_rows_render_to_their_prompt_tokens(prefect_harness, sources_campaign, tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    from ratchet.flows.rounds.campaign import run_campaign
    from ratchet.loop.campaign.round_context import save_config
    from ratchet.loop.config import load_config

    cfg_path, db = sources_campaign
    run_campaign(save_config(load_config(cfg_path)), rounds=1)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    trained = query(db, "SELECT count(*) FROM training_examples")[1][0][0]
    assert trained > 0  # the tiny model answers 7: the sums whose gold is 7 are verified and trained on
    for what in ("training-set", "rollouts", "evals"):
        _, rows = _export(db, what, tmp_path / f"{what}.jsonl")
        assert rows and (what != "training-set" or len(rows) == trained)
        for row in rows:
            assert row["trajectory_id"] and row["prompt_tokens"] > 0
            assert row["messages"][0] == {"role": "system", "content": SYSTEM}  # the source's prompt, not the demo's
            assert len(row["messages"]) == 1 + 2 * 2 + 1 + 1  # system, two few-shot turns from the file, user, completion
            assert _rendered_tokens(tok, row) == row["prompt_tokens"], row["trajectory_id"]
    # every stored chat is the one the engine counted: the store itself agrees with the export
    n_null = query(db, "SELECT count(*) FROM trajectories WHERE prompt_messages IS NULL")[1][0][0]
    assert n_null == 0
    # the round's subflow is named after its campaign (a daemon serving several campaigns lists them apart)
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        assert "own round-1" in {r.name for r in client.read_flow_runs()}
