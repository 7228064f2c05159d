import json

from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.flows.rounds.state.reverify import reverify
from ratchet.store.db import init_db, query, transaction
from ratchet.store.ingest import insert_rows
from ratchet.verifiers.reward import VERSION
from tests.store.test_store import NOW, traj, verdict


def seed_store(path):
    init_db(path)
    with transaction(path) as con:
        insert_rows(
            con,
            "campaigns",
            [
                dict(
                    campaign_id="c",
                    name="c",
                    base_checkpoint_id="c0",
                    created_at=NOW,
                    config_json=json.dumps({"verifier": {"format_template": "answer_line", "format_weight": 0.1}}),
                )
            ],
        )
        insert_rows(
            con,
            "rounds",
            [
                dict(
                    round_id="r1",
                    campaign_id="c",
                    round_index=1,
                    incumbent_checkpoint_id="c0",
                    status="completed",
                    started_at=NOW,
                    finished_at=NOW,
                    stage_seconds_json=None,
                )
            ],
        )
        insert_rows(con, "prompts", [dict(prompt_id="p1", source="s", task="sum", question="3+4?", answer="7", split="train")])
        insert_rows(
            con,
            "trajectories",
            [
                traj("a", "p1", "3 + 4 = 7\nAnswer: 7"),
                traj("b", "p1", "3 + 4 = 8\nAnswer: 8", sample=1),
                traj("c", "p1", "Answer: 7", sample=2),
                traj("d", "p1", "no idea", sample=3),
            ],
        )
        old = [verdict("a", False, "composite-0"), verdict("b", True, "composite-0"), verdict("c", True, "composite-0")]
        insert_rows(con, "verdicts", old)


def test_reverify_adds_rows_counts_flips_and_is_idempotent(tmp_path):
    db = tmp_path / "v.duckdb"
    seed_store(db)
    res = reverify(db)
    assert res["rescored"] == 4 and res["inserted"] == 4
    assert res["flips"] == {"wrong->right": 1, "right->wrong": 1, "unchanged": 1, "new": 1}
    # Old verdicts are untouched; new ones carry the current version.
    assert query(db, "SELECT count(*) FROM verdicts WHERE verifier_version = 'composite-0'")[1][0][0] == 3
    got = dict(query(db, "SELECT trajectory_id, correct FROM verdicts WHERE verifier_version = ?", [VERSION])[1])
    assert got == {"a": True, "b": False, "c": True, "d": False}
    again = reverify(db)
    assert again["rescored"] == 0 and again["inserted"] == 0


def test_reverify_cli_json(tmp_path):
    db = tmp_path / "v.duckdb"
    seed_store(db)
    r = CliRunner().invoke(app, ["reverify", "--db", str(db), "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["flips"]["right->wrong"] == 1


def test_reverify_writes_under_the_configs_run_dir(tmp_path):
    db = tmp_path / "v.duckdb"
    seed_store(db)
    runs = tmp_path / "elsewhere" / "runs"
    (tmp_path / "r.toml").write_text(f'db = "{db}"\nrun_dir = "{runs}"\n')
    r = CliRunner().invoke(app, ["reverify", "--config", str(tmp_path / "r.toml"), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert len(list((runs / "reverify").glob("*.parquet"))) == 1 and not db.with_suffix(".runs").exists()


def test_reverify_refuses_a_duckdb_that_is_not_a_store(tmp_path):
    import duckdb

    other = tmp_path / "other.duckdb"
    with duckdb.connect(str(other)) as con:
        con.execute("CREATE TABLE sales (x INT)")
    r = CliRunner().invoke(app, ["reverify", "--db", str(other)])
    assert r.exit_code == 2 and "not a Ratchet store" in r.stderr and r.stderr.strip().count("\n") == 0, r.output


def test_reverify_scores_code_prompts_with_the_code_verifier(tmp_path):
    db = tmp_path / "s.duckdb"
    seed_store(db)
    tests = json.dumps([{"entry_point": "inc"}, "assert inc(1) == 2"])  # no reference solution: declared (issue 36)
    with transaction(db) as con:
        insert_rows(
            con,
            "prompts",
            [
                dict(
                    prompt_id="p2",
                    source="code",
                    task="t",
                    question="def inc(x):",
                    answer="",
                    split="train",
                    task_format="humaneval",
                    tests_json=tests,
                )
            ],
        )
        insert_rows(
            con,
            "trajectories",
            [traj("e", "p2", "```python\ndef inc(x):\n    return x + 1\n```"), traj("f", "p2", "def inc(x): return x", sample=1)],
        )
    reverify(db)
    got = dict(
        query(db, "SELECT trajectory_id, verifier || ':' || correct FROM verdicts WHERE verifier_version = ?", [VERSION])[1]
    )
    assert got["e"] == "code:true" and got["f"] == "code:false" and got["a"] == "math:true"
