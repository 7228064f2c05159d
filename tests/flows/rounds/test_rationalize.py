"""Rationalization (sft.rationalization, STaR): the hint is in what the engine saw, never in what is trained on."""

import json
from dataclasses import asdict
from datetime import UTC, datetime

import pyarrow.parquet as pq

from ratchet.flows.compute.learner_requests import stored_chats
from ratchet.flows.rounds.stages.rationale_data import rationalized_examples
from ratchet.loop.campaign.round_context import Ctx
from ratchet.loop.config import RatchetConfig
from ratchet.loop.tasks.rationalization import hint_text, hinted, unsolved
from ratchet.loop.tasks.sources import make_prompt
from ratchet.store.db import connect, init_db, transaction
from ratchet.store.ingest import insert_rows
from ratchet.store.queries import training_set
from ratchet.verifiers.reward import VERSION

NOW = datetime.now(UTC)


def test_hint_goes_into_the_question_turn_only():
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "What is 1 + 1?"}, {"role": "assistant", "content": "Answer: 2"}, {"role": "user", "content": "What is 3 + 4?"}]  # fmt: skip
    out = hinted(chat, "7")
    assert (
        out[:3] == chat[:3]
        and out[3]["content"] == "What is 3 + 4?\n\n" + hint_text("7")
        and chat[3]["content"] == "What is 3 + 4?"
    )
    ps = [make_prompt("s", "t", f"q{i}", str(i), 0.0, split="train") for i in range(3)]
    code = make_prompt("s", "t", "def f", "", 0.0, task_format="humaneval", tests=["assert f()"], split="train")
    assert unsolved([*ps, code], {ps[1].prompt_id}) == [ps[0], ps[2]]


def test_rationalized_examples_are_trained_without_the_hint(tmp_path):
    db = tmp_path / "s.duckdb"
    init_db(db)
    cfg = RatchetConfig.model_validate({"campaign": "rat", "db": str(db), "algorithm": "rft", "sft": {"rationalization": True}})
    ctx = Ctx(cfg, round_index=1)
    p = make_prompt("arithmetic", "sum_small", "What is 13 + 14?", "27", 0.0, split="train")
    plain = ctx.messages(p)
    hint_chat = hinted(plain, p.answer)
    with transaction(db) as con:
        insert_rows(con, "campaigns", [dict(campaign_id=ctx.campaign_id, name="rat", base_checkpoint_id="b", config_json="{}", created_at=NOW)])  # fmt: skip
        insert_rows(con, "rounds", [dict(round_id=ctx.round_id, campaign_id=ctx.campaign_id, round_index=1, incumbent_checkpoint_id="b", status="running", started_at=NOW)])  # fmt: skip
        insert_rows(con, "prompts", [asdict(p)])
        base = dict(round_id=ctx.round_id, prompt_id=p.prompt_id, checkpoint_id="b", sample_index=0, prompt_tokens=3, completion_tokens=4, finish_reason="stop", backend="t", temperature=0.8, top_p=1.0, max_new_tokens=8, seed=0, created_at=NOW, step=0)  # fmt: skip
        insert_rows(con, "trajectories", [
            dict(base, trajectory_id="r1", purpose="rationalization", completion="13 + 14 = 27\nAnswer: 27", prompt_messages=json.dumps(hint_chat)),
            dict(base, trajectory_id="w1", purpose="rollout", completion="Answer: 26", prompt_messages=json.dumps(plain)),
        ])  # fmt: skip
        insert_rows(con, "verdicts", [
            dict(trajectory_id="r1", verifier="math", verifier_version=VERSION, reward=1.0, correct=True, reason="ok", latency_s=0.0, created_at=NOW),
            dict(trajectory_id="w1", verifier="math", verifier_version=VERSION, reward=0.0, correct=False, reason="wrong", latency_s=0.0, created_at=NOW),
        ])  # fmt: skip
        con.execute("UPDATE verdicts SET verifier_version = (SELECT ?)", [VERSION])
    with connect(db, read_only=True) as con:
        rows = rationalized_examples(con, ctx)
        assert training_set(con, ctx.round_id, VERSION, 2) == []
        off = Ctx(cfg.model_copy(update={"sft": cfg.sft.model_copy(update={"rationalization": False})}), 1)
        assert rationalized_examples(con, off) == []
    assert [(r["trajectory_id"], r["origin"]) for r in rows] == [("r1", "rationalization")]
    (trained,) = stored_chats(ctx, rows)  # what the SFT trainer renders the example's prompt from
    assert trained == plain and hint_text("27") not in json.dumps(trained) and "Hint" not in json.dumps(trained)


def test_rationalize_stage_then_filter_trains_unhinted(tmp_path):
    """The stage on a real store with a fake engine: it answers right only when the gold is in the prompt (the
    hint), so every rollout is wrong and every rationalization right; the filter then trains on them unhinted."""
    from ratchet.flows.rounds.stages import pipeline as stages
    from ratchet.flows.rounds.stages import rationalize as stage
    from ratchet.loop.campaign.round_context import load_ctx, save_config
    from ratchet.loop.generation.sampling import Completion

    def engine(chats):  # the completion a chat gets: the hinted gold, else a wrong answer
        out = []
        for i, chat in enumerate(chats):
            q = chat[-1]["content"]
            gold = q.split("correct final answer is ")[1].split(".")[0] if "Hint" in q else None
            out += [Completion(i, k, f"Answer: {gold if gold else -1}", (1, 2), 5, "stop") for k in range(2)]
        return out

    class FakeEngine:  # the round engine's verbs the stages call; it already holds the policy "b"
        holds, progress, shared, ranks = "b", None, False, 1

        def generate(self, chats, params, name="rollouts", jobs=None):  # jobs: a commit batch of the generate stage
            out = engine(chats)
            return out if jobs is None else [out[j] for j in jobs]

    cfg = RatchetConfig.model_validate(
        {"campaign": "rat", "db": str(tmp_path / "r.duckdb"), "algorithm": "rft", "sft": {"rationalization": True},
         "tasks": {"train_prompts_per_round": 6, "heldout_prompts": 8}, "generation": {"group_size": 2, "max_new_tokens": 8}}
    )  # fmt: skip
    path = str(save_config(cfg))
    ctx = load_ctx(path, 1)
    init_db(cfg.db)
    with transaction(cfg.db) as con:
        insert_rows(con, "campaigns", [dict(campaign_id=ctx.campaign_id, name="rat", base_checkpoint_id="b", config_json="{}", created_at=NOW)])  # fmt: skip
        insert_rows(con, "rounds", [dict(round_id=ctx.round_id, campaign_id=ctx.campaign_id, round_index=1, incumbent_checkpoint_id="b", status="running", started_at=NOW)])  # fmt: skip
    fake = FakeEngine()
    stages.generate.fn(path, 1, 0, "b", fake)
    stages.verify.fn(path, 1, 0)
    stage.rationalize.fn(path, 1, "b", fake)
    examples = pq.read_table(stages.filter_trajectories.fn(path, 1, 0)).to_pylist()
    with connect(cfg.db, read_only=True) as con:
        hinted_rows = con.execute("SELECT prompt_messages FROM trajectories WHERE purpose = 'rationalization'").fetchall()
    assert len(hinted_rows) == 12 and all("Hint" in m for (m,) in hinted_rows)  # 6 unsolved prompts x G = 2
    assert len(examples) == 6  # one per prompt: its two rationalizations are the same text (duplicates dropped)
    assert {e["origin"] for e in examples} == {"rationalization"}
    assert all("Hint" not in e["prompt_messages"] for e in examples)
    assert all(json.loads(e["prompt_messages"])[-1]["content"] == e["question"] for e in examples)
