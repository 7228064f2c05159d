import json

import pytest

from ratchet.loop.config import RecordFields
from ratchet.loop.tasks.sources import ArithmeticTasks, FileTasks, TaskDataError, make_prompt_id, split_of


def JsonlTasks(path):  # noqa: N802 - a math file, as `tasks.source = "jsonl"` (now a [[tasks.sources]] entry) reads it
    return FileTasks(RecordFields(path=str(path), format="math"), "jsonl")


def test_draw_is_deterministic_and_split_pure():
    src = ArithmeticTasks(("sum_small", "product_1digit", "linear_equation", "multi_step", "sum_2digit"))
    a, b = src.draw(40, "train", seed=3), src.draw(40, "train", seed=3)
    assert a == b and len({p.prompt_id for p in a}) == 40
    assert all(p.split == "train" for p in a)
    assert all(p.split == "heldout" for p in src.draw(20, "heldout", seed=3))


def test_heldout_prompt_never_drawn_for_training_in_any_round():
    src = ArithmeticTasks(("sum_small",))
    heldout = {p.prompt_id for p in src.draw(30, "heldout", seed=0)}
    for r in range(20):
        assert heldout.isdisjoint(p.prompt_id for p in src.draw(30, "train", seed=r))


def test_split_depends_only_on_the_normalized_question():
    from ratchet.loop.tasks.sources import make_prompt

    a, b = make_prompt("s", "t", "What is  2+2?", "4", 0.5), make_prompt("other", "t", "what is 2+2? ", "4.0", 0.5)
    assert a.prompt_id != b.prompt_id and a.split == b.split == split_of("WHAT IS 2+2?", 0.5)
    assert make_prompt_id("s", "q", "a") == make_prompt_id("s", "q", "a")
    share = sum(split_of(f"question {i}", 0.2) == "heldout" for i in range(4000)) / 4000
    assert 0.17 < share < 0.23
    flips = sum(split_of(f"q {i}", 0.5) != split_of(f"Q   {i}", 0.5) for i in range(1000))
    assert flips == 0


def test_gold_answers_are_right():
    src = ArithmeticTasks(("linear_equation", "multi_step", "product_1digit"))
    for p in src.draw(60, "train", seed=1):
        if p.task == "linear_equation":
            lhs, rhs = p.question.split(": ", 1)[1].split(" = ")
            x = int(p.answer)
            assert eval(lhs.replace("x", f"*({x})")) == int(rhs)  # our own generated text, not model output
        else:
            assert eval(p.question[len("What is ") : -1]) == int(p.answer)


def test_fewshot_questions_are_never_drawn():
    src = ArithmeticTasks(("sum_small", "product_1digit"))
    shots = {q for q, _ in src.fewshot(4)}
    drawn = src.draw(300, "train", seed=0) + src.draw(60, "heldout", seed=0)
    assert shots.isdisjoint(p.question for p in drawn)


def test_unknown_level_lists_valid_ones():
    with pytest.raises(TaskDataError, match="sum_small"):
        ArithmeticTasks(("calculus",))


def test_jsonl_plain_and_gsm8k(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(
        json.dumps({"question": "2+2?", "answer": "4"})
        + "\n\n"
        + json.dumps({"question": "Tom has 3 apples...", "answer": "He has 3+4=7 apples.\n#### 1,007"})
        + "\n"
    )
    src = JsonlTasks(f)
    golds = {p.question: p.answer for p in src.prompts}
    assert golds == {"2+2?": "4", "Tom has 3 apples...": "1007"}


@pytest.mark.parametrize(
    "line,msg",
    [
        ("{not json", "t.jsonl:2: not valid JSON"),
        ('{"question": "x"}', "t.jsonl:2: missing gold answer"),
        ('{"question": "x", "answer": "steps ####  "}', "nothing after '####'"),
        ('{"answer": "3"}', 't.jsonl:2: missing "question"'),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_jsonl_errors_name_line_and_fix(tmp_path, line, msg):
    f = tmp_path / "t.jsonl"
    f.write_text('{"question": "ok?", "answer": "1"}\n' + line + "\n")
    with pytest.raises(TaskDataError, match=msg.replace("(", r"\(").replace("[", r"\[")):
        JsonlTasks(f)
