"""Evaluation sets pinned in the store: file edits never move them; training never sees an eval question."""

import json

import pytest

from ratchet.flows.rounds.campaign import prepare_campaign
from ratchet.flows.rounds.state.identity import CampaignConflict, check_same_settings
from ratchet.loop.campaign.round_context import load_ctx, save_config
from ratchet.loop.config import load_config
from ratchet.store.db import connect, query


def _lines(start, n):
    return [json.dumps({"question": f"What is {i} plus {i + 1}?", "answer": str(2 * i + 1)}) for i in range(start, start + n)]


@pytest.fixture
def campaign(tmp_path, tiny_model_dir):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(_lines(0, 300)) + "\n")
    overrides = {
        "db": str(tmp_path / "p.duckdb"),
        "campaign": "pin",
        "model.name_or_path": str(tiny_model_dir),
        "tasks.source": "jsonl",
        "tasks.path": str(tasks),
        "tasks.heldout_prompts": 20,
    }
    return tasks, overrides


def test_appending_lines_keeps_eval_ids_order_and_eval_set(campaign):
    tasks, overrides = campaign
    path = save_config(load_config(None, **overrides))
    prepare_campaign.fn(str(path))
    before, es = [p.prompt_id for p in load_ctx(path).heldout()], load_ctx(path).eval_set_id()
    stored = [r[0] for r in query(overrides["db"], "SELECT prompt_id FROM eval_set_prompts ORDER BY position")[1]]
    assert stored == before and len(before) == 20

    with tasks.open("a") as f:  # the file grows between two rounds (and the run dir's copy is lost)
        f.write("\n".join(_lines(300, 100)) + "\n")
    load_ctx(path).pinned_eval_path.unlink()
    assert [p.prompt_id for p in load_ctx(path).fresh_heldout()] != before  # a re-draw would move the set
    prepare_campaign.fn(str(path))
    ctx = load_ctx(path)
    assert [p.prompt_id for p in ctx.heldout()] == before and ctx.eval_set_id() == es  # same set: the best-ever floor continues
    banned = {" ".join(p.question.lower().split()) for p in ctx.heldout()}
    for r in range(1, 6):
        assert banned.isdisjoint(" ".join(p.question.lower().split()) for p in load_ctx(path, r).train_prompts())


def test_changing_an_eval_definition_is_refused(campaign, tmp_path):
    tasks, overrides = campaign
    prepare_campaign.fn(str(save_config(load_config(None, **overrides))))
    bench = tmp_path / "bench.jsonl"
    bench.write_text("\n".join(_lines(1000, 5)) + "\n")
    changed = load_config(None, **overrides, evals=[{"name": "bench", "file": {"path": str(bench)}}])
    with connect(overrides["db"], read_only=True) as con, pytest.raises(CampaignConflict, match="different settings \\(evals\\)"):
        check_same_settings(con, changed)


def test_eval_file_prompts_are_pinned_and_never_trained_on(campaign, tmp_path):
    tasks, overrides = campaign
    bench = tmp_path / "bench.jsonl"
    bench.write_text("\n".join(_lines(0, 8)) + "\n")  # the benchmark repeats 8 training-file questions
    cfg = load_config(None, **{**overrides, "campaign": "bench"}, evals=[{"name": "bench", "file": {"path": str(bench)}}])
    path = save_config(cfg)
    prepare_campaign.fn(str(path))
    ctx = load_ctx(path)
    assert [p.source for p in ctx.heldout()] == ["eval:bench"] * 8 and all(p.split == "heldout" for p in ctx.heldout())
    rows = query(overrides["db"], "SELECT eval_name, count(*) FROM eval_set_prompts GROUP BY ALL")[1]
    assert rows == [("bench", 8)]
    banned = {" ".join(p.question.lower().split()) for p in ctx.heldout()}
    for r in range(1, 40):
        assert banned.isdisjoint(" ".join(p.question.lower().split()) for p in load_ctx(path, r).train_prompts())


def test_a_campaign_evaluated_before_pinning_keeps_its_last_eval_set(campaign):
    from datetime import UTC, datetime

    from ratchet.store.db import transaction
    from ratchet.store.ingest import insert_rows
    from tests.store.test_store import traj

    tasks, overrides = campaign
    path = save_config(load_config(None, **overrides))
    prepare_campaign.fn(str(path))
    ctx = load_ctx(path)
    old = sorted(p.prompt_id for p in ctx.heldout()[:5])  # what an older Ratchet evaluated on
    with transaction(overrides["db"]) as con:  # a store from before eval_set_prompts existed
        con.execute("DELETE FROM eval_set_prompts")
        now = datetime.now(UTC)
        insert_rows(
            con,
            "rounds",
            [
                dict(
                    round_id=ctx.round_id,
                    campaign_id=ctx.campaign_id,
                    round_index=0,
                    incumbent_checkpoint_id="c0",
                    status="completed",
                    started_at=now,
                )
            ],
        )
        rows = [
            {**traj(f"t{i}", pid, "Answer: 1", round_id=ctx.round_id, purpose="eval_greedy"), "eval_set_id": "es-old"}
            for i, pid in enumerate(old)
        ]
        insert_rows(con, "trajectories", rows)
    ctx.pinned_eval_path.unlink()
    prepare_campaign.fn(str(path))
    assert [p.prompt_id for p in load_ctx(path).heldout()] == old
