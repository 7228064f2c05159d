"""`ratchet eval`: a model on a task file without a campaign (issue 42, item 4)."""

import json

from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.loop.evaluation.metrics import pass_at_k, wilson_interval

runner = CliRunner()


def _sums(path, n=12):
    """Sums whose gold is 7 on every third line: the tiny model answers 'Answer: 7' to everything."""
    rows = [
        {"question": f"What is {a} + {7 - a if k % 3 == 0 else 8 - a}?", "answer": str(7 if k % 3 == 0 else 8)}
        for k, a in enumerate(range(1, n + 1))
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_eval_reports_greedy_pass1_with_its_interval_and_pass_at_k(tmp_path, tiny_model_dir):
    tasks = _sums(tmp_path / "sums.jsonl")
    args = ["eval", "--model", str(tiny_model_dir), "--tasks", str(tasks), "--fewshot", "0", "--max-new-tokens", "8"]
    args += ["--system-prompt", "sys"]  # the tiny model's training prompt
    r = runner.invoke(app, [*args, "--samples", "2", "--format", "json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["prompts"] == 12 and got["correct"] == 4 and got["pass@1"] == round(4 / 12, 4)  # the 7s, exactly
    assert got["ci95"] == [round(x, 4) for x in wilson_interval(4, 12)]
    assert got["reasons"] == {"ok": 4, "wrong": 8} and got["format"] == "math" and got["samples"] == 2
    assert 0.0 <= got["pass@2"] <= 1.0 and got["completion_tokens"] > 0
    r = runner.invoke(app, [*args, "--prompts", "3"])  # the table: the first 3 prompts, one of them a 7
    assert r.exit_code == 0 and "0.333 (1/3)" in r.stdout and "95% interval" in r.stdout, r.output
    assert not list(tmp_path.glob("*.duckdb"))  # nothing written


def test_eval_refuses_a_missing_file_and_a_bad_format_in_one_line(tmp_path):
    r = runner.invoke(app, ["eval", "--tasks", str(tmp_path / "nope.jsonl")])
    assert r.exit_code == 2 and "nope.jsonl" in r.stderr and "Traceback" not in r.output
    r = runner.invoke(app, ["eval", "--tasks", str(tmp_path / "nope.jsonl"), "--format", "xml"])
    assert r.exit_code == 2 and "--format 'xml'" in r.stderr


def test_unbiased_pass_at_k_and_wilson_agree_with_known_values():
    assert pass_at_k(4, 1, 2) == 0.5 and pass_at_k(4, 0, 4) == 0.0
    lo, hi = wilson_interval(0, 16)
    assert lo == 0.0 and abs(hi - 0.1936) < 1e-4  # the 'rule of three'-like upper bound at 0/16
    lo, hi = wilson_interval(8, 16)
    assert abs(lo - 0.2800) < 1e-4 and abs(hi - 0.7200) < 1e-4


def test_eval_of_a_records_file_with_its_verifier_and_environment(tmp_path, tiny_model_dir, monkeypatch):
    """A records file (chat prompts) judged by a built-in verifier, its prompts run as episodes of the `python` tool
    environment: the tiny model answers 'Answer: 7' with no code block, so each episode ends after its first turn."""
    rows = [
        {"prompt": [{"role": "system", "content": "sys"}, {"role": "user", "content": f"What is {a} + {7 - a}?"}], "answer": "7"}
        for a in range(1, 5)
    ] + [{"prompt": [{"role": "system", "content": "sys"}, {"role": "user", "content": "What is 4 + 4?"}], "answer": "8"}]
    tasks = tmp_path / "r.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.chdir(tmp_path)
    args = ["eval", "--model", str(tiny_model_dir), "--tasks", str(tasks), "--max-new-tokens", "8", "--format", "json"]
    r = runner.invoke(app, [*args, "--verifier", "math", "--environment", "python", "--max-turns", "2"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert (got["format"], got["prompts"], got["correct"]) == ("records", 5, 4), got
    r = runner.invoke(app, [*args, "--verifier", "no_such_module:verify"])
    assert r.exit_code == 2 and "no_such_module" in r.stderr and "Traceback" not in r.output, r.output


def test_eval_with_db_stores_a_round_of_an_evaluation_only_campaign(tmp_path, tiny_model_dir):
    """--db: the evaluation lands as a completed round of campaign eval-<stem> (trajectories, verdicts, evaluations);
    the stored checkpoint's id then names the model, and a rerun adds a round but no duplicate trajectory."""
    from ratchet.loop.checkpoints import read_checkpoint_id
    from ratchet.store.db import query

    tasks, db = _sums(tmp_path / "sums.jsonl"), tmp_path / "e.duckdb"
    args = ["eval", "--tasks", str(tasks), "--fewshot", "0", "--max-new-tokens", "8", "--system-prompt", "sys", "--db", str(db)]
    r = runner.invoke(app, [*args, "--model", str(tiny_model_dir), "--samples", "2", "--format", "json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout.strip().splitlines()[-1])
    cid = read_checkpoint_id(tiny_model_dir)
    assert got["round_id"].endswith("-r1") and got["correct"] == 4
    rows = query(
        db, "SELECT c.name, r.round_index, r.status, r.incumbent_checkpoint_id FROM rounds r JOIN campaigns c USING (campaign_id)"
    )[1]
    assert rows == [("eval-sums", 1, "completed", cid)]
    counts = query(
        db, "SELECT t.purpose, count(*), count(v.trajectory_id), sum(v.correct::int) FROM trajectories t "
        "LEFT JOIN verdicts v USING (trajectory_id) GROUP BY 1 ORDER BY 1"
    )[1]  # fmt: skip
    assert counts[0] == ("eval_greedy", 12, 12, 4) and counts[1][:3] == ("eval_sample", 24, 24), counts
    evals = dict(query(db, "SELECT metric, value FROM evaluations WHERE checkpoint_id = ?", [cid])[1])
    assert evals["heldout/pass@1"] == 4 / 12 and "heldout/pass@2" in evals and evals["heldout/no_answer_rate"] == 0.0

    r = runner.invoke(app, [*args, "--model", cid[:8], "--samples", "2", "--format", "json"])  # by its id's prefix
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.strip().splitlines()[-1])["round_id"].endswith("-r2")
    assert query(db, "SELECT count(*) FROM trajectories")[1] == [(36,)]  # the same eval set and ids: nothing twice
    r = runner.invoke(app, [*args, "--model", "abcdef12"])
    assert r.exit_code == 2 and "matches 0 checkpoints" in r.stderr and "Traceback" not in r.output, r.output
    r = runner.invoke(app, ["eval", "--tasks", str(tasks), "--model", "abcdef12"])
    assert r.exit_code == 2 and "pass --db STORE" in r.stderr, r.output


def test_eval_refuses_to_store_under_a_training_campaign(tmp_path, tiny_model_dir):
    from ratchet.store.db import init_db, transaction
    from ratchet.store.ingest import insert_rows

    tasks, db = _sums(tmp_path / "sums.jsonl", 3), tmp_path / "e.duckdb"
    init_db(db)
    with transaction(db) as con:
        from datetime import datetime

        from ratchet.loop.campaign.round_context import campaign_id_of

        insert_rows(con, "campaigns", [dict(campaign_id=campaign_id_of("easy"), name="easy", base_checkpoint_id="x",
                                            config_json="{}", created_at=datetime.now())])  # fmt: skip
    args = ["eval", "--model", str(tiny_model_dir), "--tasks", str(tasks), "--max-new-tokens", "4", "--db", str(db)]
    r = runner.invoke(app, [*args, "--campaign", "easy"])
    assert r.exit_code == 2 and "trains a model" in r.stderr and "--campaign eval-NAME" in r.stderr, r.output


def test_eval_of_a_config_evaluates_its_eval_sets(tmp_path, tiny_model_dir):
    """--config without --tasks: each [[evals]] entry (a file's first N prompts; a source's held-out split)."""
    tasks = _sums(tmp_path / "sums.jsonl", 30)
    extra = _sums(tmp_path / "extra.jsonl", 6)
    (tmp_path / "c.toml").write_text(
        f'campaign = "sums"\n[model]\nname_or_path = "{tiny_model_dir}"\n[tasks]\nsystem_prompt = "sys"\n'
        '[[tasks.sources]]\npath = "sums.jsonl"\n[[evals]]\nname = "extra"\nprompts = 4\nsystem_prompt = "sys"\n'
        '[evals.file]\npath = "extra.jsonl"\n[[evals]]\nname = "own"\nsource = "sums"\nprompts = 3\n'
    )
    r = runner.invoke(app, ["eval", "--model", str(tiny_model_dir), "--config", str(tmp_path / "c.toml"), "--fewshot", "0",
                            "--max-new-tokens", "8", "--format", "json", "--db", str(tmp_path / "e.duckdb")])  # fmt: skip
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.stdout.strip().splitlines()]
    assert [x["eval_set"] for x in lines] == ["extra", "own"] and lines[0]["prompts"] == 4, lines
    assert lines[0]["tasks"] == str(extra) and lines[1]["prompts"] == 3 and lines[1]["tasks"] == str(tasks)
    from ratchet.store.db import query

    splits = query(tmp_path / "e.duckdb", "SELECT DISTINCT p.split FROM trajectories t JOIN prompts p USING (prompt_id) "
                   "WHERE t.round_id = ?", [lines[1]["round_id"]])[1]  # fmt: skip
    assert splits == [("heldout",)] and lines[1]["round_id"].endswith("-r2")  # one campaign, eval-sums, a round per set
    r = runner.invoke(app, ["eval", "--model", str(tiny_model_dir)])
    assert r.exit_code == 2 and "--config CONFIG" in r.stderr
