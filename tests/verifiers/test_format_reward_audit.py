"""Format templates, the composite reward, the TRL adapter and the audit report."""

import json
from pathlib import Path

import pytest

from ratchet import verifiers
from ratchet.verifiers.audit import CasesFileError, audit_exit_code, audit_json, run_audit
from ratchet.verifiers.format import check_format
from ratchet.verifiers.reward import as_trl_reward, score

FORMAT = [
    ("<think>a</think><answer>1</answer>", "think_answer", True),
    ("<think>a</think>\n<answer>1</answer>\n", "think_answer", True),
    ("<think>a</think><think>b</think><answer>1</answer><answer>2</answer>", "think_answer", False),
    ("<think>a</think><answer>1</answer> trailing", "think_answer", False),
    ("<answer>1</answer>", "think_answer", False),
    ("<think>a</think><answer> </answer>", "think_answer", False),
    ("work\nAnswer: 5", "answer_line", True),
    ("Answer: 5\nmore words", "answer_line", False),
    ("Answer: 3\nAnswer: 5", "answer_line", False),
    ("anything", "none", True),
    ("<think>a</think><answer>1 <answer/> 2</answer>", "think_answer", False),
    ("<think>a</think><answer>1< /answer><answer>2</answer>", "think_answer", False),
    ("<think>a</think><answer>1</answer><answer >2</answer >", "think_answer", False),
    ("<think>a</think ><answer>1</answer >", "think_answer", True),
]


@pytest.mark.parametrize("text,template,ok", FORMAT)
def test_format(text: str, template: str, ok: bool) -> None:
    v = check_format(text, template)
    assert v.format_ok is ok and v.verifier == "format"


def test_unknown_template_lists_valid() -> None:
    with pytest.raises(ValueError, match="think_answer"):
        check_format("x", "nope")


def test_composite_reward() -> None:
    good = score("<think>x</think><answer>5</answer>", "5", format_template="think_answer")
    assert good.correct and good.reward == pytest.approx(1.1) and good.format_ok and good.verifier == "composite"
    wrong_fmt_ok = score("<think>x</think><answer>4</answer>", "5", format_template="think_answer")
    assert not wrong_fmt_ok.correct and wrong_fmt_ok.reward == pytest.approx(0.1)
    unparsed = score("<think>x</think><answer>4 or 5</answer>", "5", format_template="think_answer")
    assert unparsed.reward == 0.0
    assert score(r"\boxed{5}", "5").reward == 1.0
    code = score("```python\ndef f():\n    return 1\n```", "", kind="code", tests=[{"entry_point": "f"}, "assert f() == 1"])
    assert code.correct


def test_trl_adapter_accepts_strings_and_messages() -> None:
    f = as_trl_reward("math")
    out = f(prompts=["p", "p"], completions=[r"\boxed{3}", [{"role": "assistant", "content": "Answer: 4"}]], answer=["3", "3"])
    assert out == [1.0, 0.0]
    assert f.__name__ == "ratchet_math"
    with pytest.raises(KeyError, match="answer"):
        f(prompts=["p"], completions=["x"])


def test_package_exports() -> None:
    assert "ok" in verifiers.REASONS and verifiers.Verdict
    assert verifiers.verify("math", "2", r"\boxed{2}").correct


def test_audit_json_shape(tmp_path: Path) -> None:
    cases = tmp_path / "c.jsonl"
    rows = [
        {"id": "a", "kind": "math", "gold": "2", "prediction": r"\boxed{2}", "expected": True},
        {"id": "b", "kind": "math", "gold": "2", "prediction": r"\boxed{3}", "expected": True},
        {
            "id": "c",
            "kind": "format",
            "gold": "exactly one think then one answer",
            "prediction": "<think>a</think><answer>1</answer>",
            "expected": True,
        },
    ]
    cases.write_text("\n".join(json.dumps(r) for r in rows))
    report = run_audit(cases)
    shown = json.loads(audit_json(report))
    assert set(shown) == {"total", "passed", "false_positives", "false_negatives", "errors", "by_kind", "misses", "isolation"}
    assert set(shown["by_kind"]["math"]) == {"total", "passed", "false_positives", "false_negatives", "errors"}
    assert report["true_positives"] == 2 and report["true_negatives"] == 0
    assert report["total"] == 3 and report["false_negatives"] == 1 and audit_exit_code(report) == 0
    assert report["misses"][0]["id"] == "b" and set(report["misses"][0]) == {"id", "kind", "expected", "got", "reason"}
    assert all(shown[k] == report[k] for k in ("total", "passed", "false_positives", "false_negatives", "errors", "misses"))
    from ratchet.flows.cli.inputs.verifier_commands import audit_text

    assert "misses" in audit_text(report)


def test_audit_false_positive_exit_code(tmp_path: Path) -> None:
    cases = tmp_path / "c.jsonl"
    cases.write_text(json.dumps({"id": "fp", "kind": "math", "gold": "2", "prediction": r"\boxed{2}", "expected": False}))
    assert audit_exit_code(run_audit(cases)) == 1


def test_malformed_line_names_line(tmp_path: Path) -> None:
    cases = tmp_path / "c.jsonl"
    cases.write_text('{"id": "a", "kind": "math", "gold": "1", "prediction": "1", "expected": true}\n{not json\n')
    with pytest.raises(CasesFileError, match=r":2: not valid JSON"):
        run_audit(cases)
    cases.write_text('{"id": "a", "kind": "math", "gold": "1", "prediction": "1"}\n')
    with pytest.raises(CasesFileError, match=r":1: missing field 'expected'"):
        run_audit(cases)


PREFIXED = [  # (prefix the chat template pre-filled, completion, template, ok)
    ("<think>\n", "I add them.</think><answer>5</answer>", "think_answer", True),
    ("<think>\n", "<think>I add them.</think><answer>5</answer>", "think_answer", False),
    ("", "I add them.</think><answer>5</answer>", "think_answer", False),
    ("<think>", "no closing tag <answer>5</answer>", "think_answer", False),
]


@pytest.mark.parametrize("prefix,text,template,ok", PREFIXED)
def test_format_sees_generation_prefix(prefix: str, text: str, template: str, ok: bool) -> None:
    assert check_format(text, template, prefix=prefix).format_ok is ok


def test_generation_prefix_detected_from_prompt() -> None:
    from ratchet.verifiers.format import generation_prefix

    assert generation_prefix("<|user|>2+3?<|assistant|><think>\n") == "<think>\n"
    assert generation_prefix("<|assistant|><think>x</think>") == ""
    assert generation_prefix("plain prompt") == ""
    f = as_trl_reward("format", format_template="think_answer")
    out = f(prompts=["q<|assistant|><think>\n", "q<|assistant|>"], completions=["a</think><answer>1</answer>"] * 2)
    assert out == [1.0, 0.0]
    g = as_trl_reward("composite", format_template="think_answer", format_prefix="<think>\n")
    assert g(prompts=None, completions=["a</think><answer>1</answer>"], answer=["1"]) == [pytest.approx(1.1)]
    assert score("a</think><answer>1</answer>", "1", format_template="think_answer", format_prefix="<think>").format_ok
