"""Task files of every format and reader, the split by normalized question, and task-data errors."""

import gzip
import json

import pytest

from ratchet.loop.config import RecordFields, TaskSourceConfig, load_config
from ratchet.loop.tasks.formats import humaneval_tests, load_records
from ratchet.loop.tasks.sources import FileTasks, TaskDataError, split_of
from ratchet.loop.tasks.task_sets import TaskSet, apportion, ngram_overlap, shared_run
from ratchet.verifiers.code import verify_code

HE = {
    "task_id": "T/0",
    "prompt": 'def add(a, b):\n    """Sum."""\n',
    "canonical_solution": "    return a + b\n",
    "test": "METADATA = {}\n\ndef check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0, 'msg'\n",
    "entry_point": "add",
}
MBPP = {
    "task_id": 7,
    "text": "Write a function that doubles a number.",
    "code": "def dbl(x):\n    return 2 * x",
    "test_list": ["assert dbl(XS[0]) == 4", "assert dbl(0) == 0"],
    "test_setup_code": "XS = [2, 3]",
}
STDIO = {
    "question": "Read n, print n squared.",
    "inputs": ["3\n", "4\n"],
    "outputs": ["9\n", "16\n"],
    "solutions": ["print(int(input())**2)"],
}


def write_jsonl(path, records, gz=False):
    data = "\n".join(json.dumps(r) for r in records).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_humaneval_check_becomes_setup_and_asserts():
    tests = humaneval_tests(HE["test"], "add", "x")
    assert tests == ("METADATA = {}", "assert add(1, 2) == 3", "assert add(-1, 1) == 0")


def test_humaneval_literal_loops_are_unrolled_and_others_kept_whole_for_native_check():
    got = humaneval_tests("def check(c):\n    print\n    for i in range(2, 4):\n        assert c(i, i + 1) == str(i)\n", "f", "x")
    assert got == ("assert f(2, 2 + 1) == str(2)", "assert f(3, 3 + 1) == str(3)")
    test = "def check(c):\n    for i in pick():\n        assert c(i) == i\n"
    prompt = 'def pick():\n    return [1]\n\n\ndef f(i):\n    """Doc."""\n'
    (got,) = humaneval_tests(test, "f", "x", prompt)
    assert got["entry_point"] == "f" and got["check"].startswith("def pick():") and got["check"].endswith(test)
    assert "def f" not in got["check"]  # the prompt's helpers come along, the entry point's stub does not


@pytest.mark.parametrize("fmt,rec", [("humaneval", HE), ("mbpp", MBPP), ("stdio", STDIO)])
def test_formats_are_detected_and_reference_solutions_pass(tmp_path, fmt, rec):
    f = write_jsonl(tmp_path / "t.jsonl.gz", [rec], gz=True)
    got_fmt, (r,) = load_records(RecordFields(path=str(f)), "t")
    assert got_fmt == fmt and r.tests
    program = f"```python\n{r.solution}\n```"
    assert verify_code(r.solution, program, list(r.tests), timeout_s=20).reason == "ok"
    broken = "def add(a, b):\n    return None\n" if fmt == "humaneval" else "def dbl(x):\n    return None\n"
    if fmt == "stdio":
        broken = "print(0)"
    assert verify_code(None, broken, list(r.tests), timeout_s=20).reason != "ok"


def test_parquet_and_save_to_disk_readers(tmp_path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"problem": f"What is {i} + 1?", "solution": f"It is \\boxed{{{i + 1}}}."} for i in range(5)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "ds"))
    a = FileTasks(RecordFields(path=str(tmp_path / "t.parquet")), "p")
    b = FileTasks(RecordFields(path=str(tmp_path / "ds"), split="test"), "p")
    assert [p.answer for p in a.prompts] == [str(i + 1) for i in range(5)] == [p.answer for p in b.prompts]
    with pytest.raises(TaskDataError, match="holds splits \\['test'\\]; set split"):
        FileTasks(RecordFields(path=str(tmp_path / "ds")), "p")


def test_field_mapping(tmp_path):
    f = write_jsonl(tmp_path / "m.jsonl", [{"q": "Two plus two?", "gold": "4"}])
    (p,) = FileTasks(RecordFields(path=str(f), format="math", question_field="q", answer_field="gold"), "m").prompts
    assert (p.question, p.answer, p.task_format) == ("Two plus two?", "4", "math")


def test_split_hashes_normalized_question_not_answer():
    # Records that differ only in answer formatting, case or whitespace never land on both sides.
    for i in range(300):
        q = f"What is {i} times 3?"
        assert split_of(q, 0.5) == split_of(f"  what IS {i}\ttimes 3? ", 0.5)
    share = sum(split_of(f"question {i}", 0.2) == "heldout" for i in range(4000)) / 4000
    assert 0.17 < share < 0.23


def test_same_question_with_equal_golds_is_one_prompt_on_one_side(tmp_path):
    recs = []
    for i in range(200):
        recs += [
            {"question": f"What is {i} + {i}?", "answer": str(2 * i)},
            {"question": f"what is {i} +  {i}?", "answer": f"{2 * i}.0"},
        ]
    src = FileTasks(RecordFields(path=str(write_jsonl(tmp_path / "t.jsonl", recs))), "t", 0.3)
    assert len(src.prompts) == 200
    heldout = {" ".join(p.question.lower().split()) for p in src.prompts if p.split == "heldout"}
    train = {" ".join(p.question.lower().split()) for p in src.prompts if p.split == "train"}
    assert heldout and train and heldout.isdisjoint(train)


@pytest.mark.parametrize(
    "content,msg",
    [
        (b'{"question": "caf\xe9?", "answer": "1"}\n', "t.jsonl:1: not UTF-8 text (byte 0xe9); re-save the file as UTF-8"),
        (b'{"question": "half?", "answer": "\\\\frac{"}\n', "cannot be parsed by the math verifier"),
        (
            b'{"question": "What is 6 * 7?", "answer": "42"}\n{"question": "what is 6 *  7?", "answer": "43"}\n',
            "appears with two different golds ('42' and '43')",
        ),
    ],
)
def test_task_data_errors_are_one_line(tmp_path, content, msg):
    (tmp_path / "t.jsonl").write_bytes(content)
    with pytest.raises(TaskDataError) as e:
        FileTasks(RecordFields(path=str(tmp_path / "t.jsonl")), "t")
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_heldout_count_larger_than_file_is_refused(tmp_path):
    f = write_jsonl(tmp_path / "t.jsonl", [{"question": f"q{i}?", "answer": str(i)} for i in range(3)])
    cfg = load_config(None, **{"tasks.source": "jsonl", "tasks.path": str(f), "tasks.heldout_prompts": 48})
    with pytest.raises(TaskDataError, match="tasks.heldout_prompts = 48 but the tasks hold only [0-3] held-out prompts"):
        TaskSet(cfg.tasks).eval_prompts(cfg)


def test_huge_heldout_count_is_refused_by_config():
    from ratchet.loop.config import ConfigError

    with pytest.raises(ConfigError, match="tasks.heldout_prompts"):
        load_config(None, **{"tasks.heldout_prompts": 10**9})


def test_arithmetic_with_too_few_questions_fails_fast():
    from ratchet.loop.tasks.sources import ArithmeticTasks

    with pytest.raises(TaskDataError, match="hold only .* distinct heldout questions"):
        ArithmeticTasks(("product_1digit",)).draw(100, "heldout", seed=0)


def test_sources_weights_prompts_verifiers_and_group_sizes(tmp_path):
    from ratchet.loop.config import ConfigError

    m = write_jsonl(tmp_path / "math.jsonl", [{"question": f"What is {i} + 2?", "answer": str(i + 2)} for i in range(60)])
    c = write_jsonl(
        tmp_path / "code.jsonl", [{**HE, "task_id": f"T/{i}", "prompt": HE["prompt"] + f"# {i}\n"} for i in range(60)]
    )
    cfg = load_config(
        None,
        **{"tasks.sources": [{"path": str(m), "weight": 0.6}, {"path": str(c), "weight": 0.4, "system_prompt": "code!"}]},
    )
    ts = TaskSet(cfg.tasks)
    drawn = ts.draw(10, "train", seed=1)
    assert [p.source for p in drawn].count("math") == 6 and [p.source for p in drawn].count("code") == 4
    code = next(p for p in drawn if p.source == "code")
    assert code.verifier == "code" and code.entry_point == "add" and ts.messages(code)[0]["content"] == "code!"
    assert "Answer:" in ts.messages(next(p for p in drawn if p.source == "math"))[0]["content"]
    assert apportion(7, [0.7, 0.3]) == [5, 2] and sum(apportion(5, [1, 1, 1])) == 5
    assert {g: len(ps) for g, ps in ts.group_sizes(drawn, 4).items()} == {4: 10}
    cfg8 = load_config(None, **{"tasks.sources": [{"path": str(m)}, {"path": str(c), "group_size": 8}]})
    by_g = TaskSet(cfg8.tasks).group_sizes(drawn, 4)
    assert {p.source for p in by_g[8]} == {"code"} and {p.source for p in by_g[4]} == {"math"}
    with pytest.raises(ConfigError, match="grpo needs one group size"):
        load_config(None, algorithm="grpo", **{"tasks.sources": [{"path": str(m), "group_size": 8}]})


def test_source_names_must_be_unique(tmp_path):
    from ratchet.loop.config import ConfigError

    with pytest.raises(ConfigError, match="appear more than once"):
        load_config(None, **{"tasks.sources": [{"path": "a/x.jsonl"}, {"path": "b/x.jsonl"}]})
    assert TaskSourceConfig(path="d/gsm8k.jsonl.gz").source_name() == "gsm8k"


def test_ngram_overlap_report():
    from ratchet.loop.tasks.sources import make_prompt

    words = "one two three four five six seven eight nine ten eleven twelve thirteen"
    ev = make_prompt("e", "t", f"{words} fourteen?", "1", 0.2)
    tr = make_prompt("s", "t", f"Prefix {words} other?", "1", 0.2)
    far = make_prompt("s", "t", "A different question entirely?", "1", 0.2)
    assert ngram_overlap([tr, far], [ev]) == [(tr, ev)]
    # the warning's evidence: the whole run the two share, not a cut of the first 60 characters (issue 42, finding 8)
    assert shared_run(tr.question, ev.question) == words
    assert shared_run("a b c " + words + " x y", "q " + words + " x z") == words + " x"
    assert shared_run(far.question, ev.question) == ""
