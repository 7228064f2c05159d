"""A code round and a mixed math+code round from the CLI on a tiny model (CPU, G = 2, 1 round each).

The tiny model (tests/conftest.py) answers everything with ``Answer: 7``. That text is valid Python (an
annotation), so as a program it prints nothing: stdio tasks whose expected output is empty pass and the
others fail, which gives the code verifier right and wrong trajectories to store and train on.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet.flows.report.render import metrics_rows
from ratchet.store.db import connect, query

pytestmark = pytest.mark.slow

HE = {
    "prompt": 'def inc(x):\n    """Return x + 1."""\n',
    "canonical_solution": "    return x + 1\n",
    "test": "def check(candidate):\n    assert candidate(1) == 2\n",
    "entry_point": "inc",
}


def _files(tmp_path: Path) -> dict[str, Path]:
    stdio = [
        {
            "task_id": f"s{i}",
            "question": f"Program {i}: print {'nothing' if i % 2 else i}.",
            "inputs": [""],
            "outputs": ["" if i % 2 else str(i)],
        }
        for i in range(30)
    ]
    code = [{**HE, "task_id": f"h{i}", "prompt": HE["prompt"] + f"    # variant {i}\n"} for i in range(30)]
    math = [
        {"question": f"What is {i} + {7 - i}?", "answer": "7"}
        if i % 2
        else {"question": f"What is {i} + 1?", "answer": str(i + 1)}
        for i in range(2, 40)
    ]
    out = {}
    for name, recs in (("stdio", stdio), ("code", code), ("math", math)):
        out[name] = tmp_path / f"{name}.jsonl"
        out[name].write_text("".join(json.dumps(r) + "\n" for r in recs))
    return out


def _config(tmp_path: Path, model: Path, campaign: str, sources: list[tuple[str, Path, str, float]]) -> Path:
    lines = [
        f'campaign = "{campaign}"', "max_rounds = 3", f'db = "{tmp_path / "t.duckdb"}"',
        "[model]", f'name_or_path = "{model}"',
        "[tasks]", "train_prompts_per_round = 6", "heldout_prompts = 4", "heldout_fraction = 0.3",
        "[generation]", "group_size = 2", "max_new_tokens = 8", "temperature = 0.7",
        "[sft]", "epochs = 1",
    ]  # fmt: skip
    for name, path, fmt, weight in sources:
        lines += ["[[tasks.sources]]", f'name = "{name}"', f'path = "{path}"', f'format = "{fmt}"', f"weight = {weight}"]
        lines += ["group_size = 3"] if name == "stdio" else []  # G per source: 3 for stdio, 2 (generation) for the others
    cfg = tmp_path / f"{campaign}.toml"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


def ratchet(*args: str) -> str:
    exe = Path(sys.executable).with_name("ratchet")
    env = {**os.environ, "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180"}  # a busy CI machine starts it slowly
    p = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@pytest.mark.parametrize("kind", ["code", "mixed"])
def test_code_and_mixed_rounds_from_the_cli(tmp_path, tiny_model_dir, kind):
    f = _files(tmp_path)
    sources = [("stdio", f["stdio"], "stdio", 0.5), ("code", f["code"], "humaneval", 0.5)]
    if kind == "mixed":
        sources = [("math", f["math"], "math", 0.5), ("code", f["code"], "humaneval", 0.25), ("stdio", f["stdio"], "stdio", 0.25)]
    cfg = _config(tmp_path, tiny_model_dir, kind, sources)
    ratchet("run", "--config", str(cfg), "--rounds", "1")  # at most one of the campaign's 3 rounds now
    db = tmp_path / "t.duckdb"
    assert query(db, "SELECT count(*) FROM rounds")[1][0][0] == 1
    group_sizes = """SELECT p.source, max(n) FROM (SELECT prompt_id, count(*) AS n FROM trajectories WHERE purpose = 'rollout'
                     GROUP BY ALL) JOIN prompts p USING (prompt_id) GROUP BY ALL ORDER BY ALL"""
    assert dict(query(db, group_sizes)[1]) == {name: 3 if name == "stdio" else 2 for name, *_ in sources}
    by_verifier = dict(
        query(
            db,
            """SELECT v.verifier, count(*) FROM verdicts v JOIN trajectories t USING (trajectory_id) JOIN prompts p USING (prompt_id)
               GROUP BY ALL""",
        )[1]
    )
    assert by_verifier.get("code", 0) > 0 and (by_verifier.get("math", 0) > 0) == (kind == "mixed")
    wrong_verifier = """SELECT count(*) FROM verdicts v JOIN trajectories USING (trajectory_id) JOIN prompts p USING (prompt_id)
                        WHERE v.verifier <> CASE WHEN p.task_format = 'math' THEN 'math' ELSE 'code' END"""
    assert query(db, wrong_verifier)[1][0][0] == 0
    trained_code = """SELECT count(*) FROM training_examples JOIN trajectories USING (trajectory_id) JOIN prompts p USING (prompt_id)
                      WHERE p.task_format <> 'math'"""
    correct_code = """SELECT count(*) FROM trajectories t JOIN verdicts v USING (trajectory_id) JOIN prompts p USING (prompt_id)
                      WHERE t.purpose = 'rollout' AND v.correct AND p.task_format <> 'math' AND p.split = 'train'"""
    if query(db, correct_code)[1][0][0]:
        assert query(db, trained_code)[1][0][0] > 0
    in_eval = (
        "SELECT count(*) FROM training_examples JOIN trajectories USING (trajectory_id) JOIN eval_set_prompts USING (prompt_id)"
    )
    assert query(db, in_eval)[1][0][0] == 0
    # each per-source held-out metric counts that source's eval prompts, the overall one all of them
    per_source_n = """SELECT e.metric, e.num_prompts, (SELECT count(DISTINCT t.prompt_id) FROM trajectories t JOIN prompts p USING (prompt_id)
                          WHERE t.purpose = 'eval_greedy' AND t.checkpoint_id = e.checkpoint_id
                          AND t.eval_set_id = e.eval_set_id AND e.metric LIKE 'heldout/' || p.source || '/%')
                      FROM evaluations e WHERE e.metric LIKE 'heldout/%/%'"""
    for metric, n, expected in query(db, per_source_n)[1]:
        assert n == expected > 0, metric
    with connect(db, read_only=True) as con:
        (round_id,) = con.execute("SELECT round_id FROM rounds").fetchone()
        rows = metrics_rows(con, round_id)  # the rows of the round's metrics artifact
    names = {r["metric"] for r in rows}
    assert any(n.startswith("heldout/code/") for n in names) or any(n.startswith("heldout/stdio/") for n in names)
    assert any(r["scope"].startswith("rollouts, source stdio (stdio, verifier code)") for r in rows)
    ratchet("report", "--db", str(db), "--out", str(tmp_path / "r.html"))
    html = (tmp_path / "r.html").read_text()
    assert "source stdio" in html and "verifier code" in html
