"""Task formats: turn each record of a task file into a question, a gold and tests.

Records come from ``ratchet.loop.tasks.readers`` (``.jsonl`` / ``.jsonl.gz``, ``.parquet``, ``.csv``/``.tsv``, a ``datasets.save_to_disk``
folder; each within bounds). Formats:

* ``math``: ``question`` (or ``problem``/``prompt``) and a gold ``answer`` (GSM8K ``... #### 42``) or a
  worked ``solution`` whose last ``\\boxed{}`` is the gold.
* ``humaneval``: ``prompt`` (signature + docstring), ``test`` defining ``check(candidate)``,
  ``entry_point``, optional ``canonical_solution``. The test is converted here into the shape the code
  verifier reads today (setup statements plus ``assert`` lines calling the entry point): the prompt's
  helpers (imports, ``def poly``) and module-level statements of the test become setup, the body of ``check`` becomes asserts with ``candidate``
  renamed to the entry point. A ``check`` body holding other statements (loops, prints) is refused
  with ``TaskDataError`` naming the task (``ratchet tasks check`` counts these).
* ``mbpp``: ``text``, ``test_list`` (assert lines), ``test_setup_code``, ``test_imports`` (import lines the
  tests need, MBPP sanitized), optional ``code``.
* ``stdio``: a statement (``question``/``problem``/``description``) and ``inputs``/``outputs`` lists
  (APPS/CodeContests style; APPS' ``input_output`` JSON string is read too).
* ``records``: a ``prompt`` (a string or a chat-message list) and any other fields, judged by the source's own
  verifier (``ratchet.loop.tasks.record_prompts``). Never detected from the fields: a source that names a
  ``verifier`` (or an ``environment``) is read as records.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

from ratchet.loop.config import RecordFields, TaskFormat
from ratchet.loop.tasks.gold_style import gold_style_problems
from ratchet.loop.tasks.readers import TaskDataError, read_records
from ratchet.loop.tasks.record_prompts import record_json, record_prompt, record_reference
from ratchet.verifiers.math.extraction.extract import find_boxed
from ratchet.verifiers.math.golds import choice_gold
from ratchet.verifiers.math.parsing.parse import ParseError, TooLarge, parse_answer

FORMATS: tuple[str, ...] = ("math", "humaneval", "mbpp", "stdio", "records")

# System prompts per format: small models follow an output format only when told exactly which.
DEFAULT_SYSTEM_PROMPTS = {
    "math": "Solve the problem. Show your reasoning briefly, then give the final line as 'Answer: <answer>'.",
    "humaneval": "Complete the Python function. Reply with the whole function (signature included) in one ```python block.",
    "mbpp": "Write the Python function the task asks for. Reply with the code in one ```python block.",
    "stdio": "Write a Python program that reads the input from stdin and prints the answer. Reply with it in one ```python block.",
    "records": "",  # a record's own prompt says what to answer and how (its verifier decides what it reads)
}


@dataclass(frozen=True)
class TaskRecord:
    """One task as read from a file, before it gets an id and a split.

    Attributes:
        question: the text the model sees as the user turn.
        answer: math gold (``""`` for code tasks: their tests decide).
        tests: code tests as the code verifier reads them (assert/setup lines, stdio dicts); None for math.
        entry_point: the function under test (humaneval/mbpp), else None.
        solution: a reference solution (a whole program for code), else None.
        task: task family for per-task metrics (a ``task`` field, else the source name).
        task_id: the record's own id (``task_id`` field) or ``<line>``, to report failures.
        record_json: the whole record as JSON (``records`` format: what its verifier is given), else None.
    """

    question: str
    answer: str
    tests: tuple | None
    entry_point: str | None
    solution: str | None
    task: str
    task_id: str
    record_json: str | None = None


# Where a file's question/gold live when not under the format's usual names (first match wins).
QUESTION_ALIASES = ("query", "instruction", "input")
ANSWER_ALIASES = ("response", "output", "target", "final_answer")


def guess_fields(first: dict) -> dict[str, str]:
    """``question_field``/``answer_field`` for a record without the usual names (MetaMathQA: query, response)."""
    out = {}
    if not any(k in first for k in ("question", "problem", "prompt", "text")):
        q = next((k for k in QUESTION_ALIASES if isinstance(first.get(k), str)), None)
        out |= {"question_field": q} if q else {}
    if not any(k in first for k in ("answer", "solution", "test", "test_list", "inputs", "outputs", "input_output")):
        a = next((k for k in ANSWER_ALIASES if k in first), None)
        out |= {"answer_field": a} if a else {}
    return out


def detect_spec(spec: RecordFields, where: str, first: dict) -> RecordFields:
    """``spec`` with the fields and format a file's first record shows, where ``spec`` leaves them unset: the one
    detection ``ratchet init`` and ``ratchet tasks check`` share (MetaMathQA's ``query``/``response`` included).

    Raises:
        TaskDataError: as ``detect_format``.
    """
    unset = {k: v for k, v in guess_fields(first).items() if getattr(spec, k) is None}
    spec = spec.model_copy(update=unset)
    return spec if spec.format else spec.model_copy(update={"format": detect_format(first, where, spec)})


def detect_format(rec: dict, where: str, spec: RecordFields | None = None) -> TaskFormat:
    """The format a record's fields say it has, the field mapping of ``spec`` included (a record whose gold is in
    ``spec.answer_field`` is math, whose tests are in ``spec.tests_field`` with an entry point is humaneval).

    Raises:
        TaskDataError: no known field set; the message lists the fields to use.
    """
    if spec is not None:
        tests, entry = spec.tests_field or "test", spec.entry_point_field or "entry_point"
        if tests in rec and entry in rec and (spec.tests_field or spec.entry_point_field):
            return "humaneval"
        if spec.tests_field and isinstance(rec.get(spec.tests_field), list):
            return "mbpp"
        if spec.answer_field and spec.answer_field in rec:
            return "math"
    if "test" in rec and "entry_point" in rec:
        return "humaneval"
    if "test_list" in rec:
        return "mbpp"
    if ("inputs" in rec and "outputs" in rec) or "input_output" in rec:
        return "stdio"
    if any(k in rec for k in ("answer", "solution")):
        return "math"
    raise TaskDataError(
        f"{where}: cannot tell the task format from fields {sorted(rec)[:8]}; set format = one of {list(FORMATS)} "
        "(math needs question+answer, humaneval prompt+test+entry_point, mbpp text+test_list, stdio inputs+outputs)"
    )


def _text(rec: dict, where: str, field: str | None, defaults: tuple[str, ...], what: str) -> str:
    keys = (field,) if field else defaults
    for k in keys:
        v = rec.get(k)
        if isinstance(v, str) and v.strip():
            return v
    raise TaskDataError(f'{where}: missing "{keys[0]}"; every record needs a non-empty {what} (or set {what}_field)')


# The final line of a worked solution that states its answer: MetaMathQA's 'The answer is: 51', an 'Answer: 51' line.
_FINAL_MARKER = re.compile(r"(?:^|\n)[ \t]*(?:The answer is:?|Answer:)[ \t]*([^\n]{1,80}?)[ \t]*$", re.IGNORECASE)
_CALCULATOR = re.compile(r"<<[^<>\n]{0,200}>>")  # GSM8K's calculator annotations: 48/2 = <<48/2=24>>24


def worked_solution(rec: dict, spec: RecordFields, gold: str) -> str | None:
    """A math record's worked solution as a few-shot answer: the reasoning (``spec.solution_field``, else the answer
    field when it holds reasoning before ``#### N`` or ``The answer is: N``, else a ``solution`` field such as MATH's)
    with GSM8K's ``<<...>>`` calculator annotations removed, then ``Answer: <gold>`` as the final line. None when the
    record holds only a bare answer (nothing to show but ``Answer: N``)."""
    answer = rec.get(spec.answer_field or "answer")
    texts = [rec.get(spec.solution_field)] if spec.solution_field else []
    texts += [answer if isinstance(answer, str) and ("####" in answer or _FINAL_MARKER.search(answer)) else None]
    texts += [rec.get("solution")]
    text = next((t for t in texts if isinstance(t, str) and t.strip()), None)
    if text is None:
        return None
    text = _CALCULATOR.sub("", text)
    if "####" in text:
        text = text.rsplit("####", 1)[0]
    elif (m := _FINAL_MARKER.search(text)) is not None:
        text = text[: m.start()]
    text = text.strip()
    if not text or text.replace(",", "") == gold:
        return None
    return f"{text}\nAnswer: {gold}"


def math_gold(rec: dict, where: str, field: str | None) -> str:
    """Gold of a math record: ``answer`` (text after GSM8K's ``####``) or the last ``\\boxed{}`` of ``solution``; with
    a ``choices`` list, that gold and its options (``verifiers.math.golds.choice_gold``).

    Raises:
        TaskDataError: no gold, an empty one, or one the math verifier cannot parse (e.g. ``\\frac{``).
    """
    key = field or ("answer" if rec.get("answer") not in (None, "") else "solution")
    ans = rec.get(key)
    if ans is None or (isinstance(ans, str) and not ans.strip()):
        raise TaskDataError(f'{where}: missing gold answer; every line needs a non-empty "answer" (or "... #### 42")')
    ans = str(ans)
    if "####" in ans:
        ans = ans.rsplit("####", 1)[1]
        if not ans.strip():
            raise TaskDataError(f"{where}: nothing after '####'; put the final answer after it, e.g. '#### 42'")
    elif key == "solution" or "\\boxed" in ans:
        boxes = find_boxed(ans)
        if not boxes:
            raise TaskDataError(f'{where}: the worked solution has no \\boxed{{...}} final answer; add one or an "answer" field')
        ans = boxes[-1]
    elif (marked := _FINAL_MARKER.search(ans[-400:])) is not None:  # MetaMathQA 'The answer is: 51', 'Answer: 51'
        ans = marked.group(1).rstrip(".").strip()
    ans = ans.strip()
    plain = ans.replace(",", "")
    ans = plain if plain.lstrip("-").isdigit() else ans
    try:
        parse_answer(ans)
    except (ParseError, TooLarge) as e:
        raise TaskDataError(
            f"{where}: gold answer {ans[:60]!r} cannot be parsed by the math verifier ({e}); fix the gold"
        ) from None
    if rec.get("choices") is not None:  # a multiple-choice record: its options travel with the gold to the verifier
        try:
            return choice_gold(ans, rec["choices"] if isinstance(rec["choices"], list) else [])
        except ValueError as e:
            raise TaskDataError(f'{where}: "choices" {e}; give a list of option texts in letter order A, B, ...') from None
    return ans


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.copy_location(ast.Name(self.new, node.ctx), node) if node.id == self.old else node


def _loop_values(it: ast.expr) -> list | None:
    """The values of a loop's iterable when it is a literal list/tuple or ``range`` of constants (else None)."""
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and not it.keywords:
        try:
            r = range(*[ast.literal_eval(a) for a in it.args])
        except (ValueError, TypeError, SyntaxError, OverflowError):
            return None
        values = list(r) if len(r) <= 1000 else None  # never listed past the bound (range(400000000): 3.4 GB)
    else:
        try:
            values = ast.literal_eval(it)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
        values = list(values) if isinstance(values, (list, tuple)) else None
    return values if values is not None and len(values) <= 1000 else None


def _unroll(stmt: ast.stmt) -> list[str] | None:
    """``for x in <literal or range>: assert ...`` as one assert per value (x replaced by the value's literal)."""
    if not isinstance(stmt, ast.For) or stmt.orelse or not isinstance(stmt.target, ast.Name):
        return None
    if not all(isinstance(b, ast.Assert) for b in stmt.body):
        return None
    values = _loop_values(stmt.iter)
    if values is None:
        return None
    out = []
    for v in values:
        sub = _Subst(stmt.target.id, ast.parse(repr(v), mode="eval").body)
        out += [ast.unparse(ast.Assert(sub.visit(ast.parse(ast.unparse(b.test), mode="eval").body))) for b in stmt.body]
    return out


class _Subst(ast.NodeTransformer):
    def __init__(self, name: str, value: ast.expr) -> None:
        self.name, self.value = name, value

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return self.value if node.id == self.name and isinstance(node.ctx, ast.Load) else node


def _prompt_helpers(prompt: str, entry_point: str) -> str:
    """The prompt's own definitions (imports, helpers such as ``poly``), without the entry point's def."""
    try:
        mod = ast.parse(prompt)
    except SyntaxError:
        return ""
    keep = [n for n in mod.body if not (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry_point)]
    return "".join(ast.unparse(n) + "\n" for n in keep)


def _helper_statements(prompt: str, entry_point: str) -> list[str]:
    helpers = _prompt_helpers(prompt, entry_point)
    if not helpers:
        return []
    keep = (ast.Import, ast.ImportFrom, ast.Assign, ast.FunctionDef, ast.ClassDef)
    return [ast.unparse(n) for n in ast.parse(helpers).body if isinstance(n, keep)]


def humaneval_tests(test: str, entry_point: str, where: str, prompt: str = "") -> tuple[str, ...]:
    """HumanEval's ``check(candidate)`` test as setup lines plus ``assert`` lines on ``entry_point``.

    A ``check`` body that is not only asserts, assignments, imports and defs (a seeded random loop,
    a helper call) is kept whole as one ``{"check": test, "entry_point": ...}`` test, which the code
    verifier runs natively (``check`` in a trusted process, each call to ``candidate`` a probe).

    Raises:
        TaskDataError: the test is not Python or has no ``check(candidate)``.
    """
    try:
        mod = ast.parse(test)
    except SyntaxError as e:
        raise TaskDataError(f"{where}: test is not valid Python ({e.msg} at line {e.lineno}); fix the test") from None
    # The prompt's helpers (``poly``, its imports) are the task's own bindings: trusted setup, so a program's
    # redefinition of them is never what the tests call (issue 22, class 1).
    setup, asserts, check = _helper_statements(prompt, entry_point), [], None
    for node in mod.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            check = node
        elif isinstance(node, (ast.Import, ast.ImportFrom, ast.Assign, ast.FunctionDef, ast.ClassDef)):
            setup.append(ast.unparse(node))
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            raise TaskDataError(f"{where}: test has a top-level {type(node).__name__} statement outside check(); move it inside")
    if check is None or not check.args.args:
        raise TaskDataError(f"{where}: test defines no check(candidate) function; humaneval tests need one")
    rename = _Rename(check.args.args[0].arg, entry_point)
    for stmt in check.body:
        stmt = rename.visit(stmt)
        unrolled = _unroll(stmt)
        if isinstance(stmt, ast.Assert):
            asserts.append(ast.unparse(ast.Assert(stmt.test)))  # the message is dropped: the verifier reports its own
        elif unrolled is not None:
            asserts += unrolled
        elif isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Assign, ast.FunctionDef)):
            setup.append(ast.unparse(stmt))
        elif isinstance(stmt, ast.Expr) and (
            isinstance(stmt.value, (ast.Constant, ast.Name))
            or (isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "print")
        ):
            continue  # a docstring, a bare name or a print: no effect on the verdict
        else:  # a loop, an if, a helper call: the verifier runs check() itself (probes per call)
            return ({"check": _prompt_helpers(prompt, entry_point) + test, "entry_point": entry_point},)
    if not asserts:
        raise TaskDataError(f"{where}: check() holds no assert; add at least one")
    return tuple(setup + asserts)


def _mbpp_setup(code: str, where: str) -> list[str]:
    if not code.strip():
        return []
    try:
        return [ast.unparse(n) for n in ast.parse(code).body]
    except SyntaxError as e:
        raise TaskDataError(f"{where}: test_setup_code is not valid Python ({e.msg}); fix it") from None


def _stdio_cases(rec: dict, where: str, field: str | None) -> tuple[dict, ...]:
    if field:
        raw = rec.get(field)
        data = json.loads(raw) if isinstance(raw, str) else raw
    elif "input_output" in rec:
        data = json.loads(rec["input_output"]) if isinstance(rec["input_output"], str) else rec["input_output"]
    else:
        data = {"inputs": rec.get("inputs"), "outputs": rec.get("outputs")}
    ins, outs = (data or {}).get("inputs"), (data or {}).get("outputs")
    if not isinstance(ins, list) or not isinstance(outs, list) or not ins or len(ins) != len(outs):
        raise TaskDataError(f'{where}: stdio tasks need "inputs" and "outputs" lists of equal, non-zero length')
    return tuple({"stdin": str(i), "stdout": str(o)} for i, o in zip(ins, outs))


def to_record(rec: dict, where: str, fmt: TaskFormat, spec: RecordFields, default_task: str) -> TaskRecord:
    """Convert one raw record of format ``fmt`` (see the module docstring).

    Raises:
        TaskDataError: a required field is missing or unreadable; the message names ``where`` and the fix.
    """
    task = str(rec.get("task", default_task))
    task_id = str(rec.get("task_id", where.rsplit(":", 1)[-1]))
    if fmt == "records":
        question, _ = record_prompt(rec, where, spec.question_field)
        gold = record_reference(rec, spec.answer_field)
        return TaskRecord(question, gold, None, None, None, task, task_id, record_json(rec, where))
    if fmt == "math":
        q = _text(rec, where, spec.question_field, ("question", "problem", "prompt"), "question")
        worked = rec.get(spec.solution_field or "solution")  # a worked solution: what a cold-start sft phase trains on
        solution = worked.strip() if isinstance(worked, str) and worked.strip() else None
        return TaskRecord(q.strip(), math_gold(rec, where, spec.answer_field), None, None, solution, task, task_id)
    if fmt == "humaneval":
        prompt = _text(rec, where, spec.question_field, ("prompt",), "question")
        entry = _text(rec, where, spec.entry_point_field, ("entry_point",), "entry_point").strip()
        tests = humaneval_tests(_text(rec, where, spec.tests_field, ("test",), "tests"), entry, where, prompt)
        body = rec.get(spec.solution_field or "canonical_solution")
        solution = prompt + body if isinstance(body, str) and body.strip() else None
        if solution is None and not any(isinstance(t, dict) for t in tests):
            tests = (*tests, {"entry_point": entry})  # no reference solution names it: the tests declare it (issue 36)
        return TaskRecord(prompt, "", tests, entry, solution, task, task_id)
    if fmt == "mbpp":
        text = _text(rec, where, spec.question_field, ("text", "prompt", "question"), "question")
        lines = rec.get(spec.tests_field or "test_list")
        if not isinstance(lines, list) or not lines or not all(isinstance(t, str) for t in lines):
            raise TaskDataError(f'{where}: mbpp tasks need "test_list", a non-empty list of assert lines')
        setup = _mbpp_setup(str(rec.get("test_setup_code") or ""), where)
        imports = rec.get("test_imports") or []
        if not isinstance(imports, list) or not all(isinstance(t, str) for t in imports):
            raise TaskDataError(f'{where}: "test_imports" must be a list of import lines, e.g. ["import math"]')
        setup = _mbpp_setup("\n".join(imports), where) + setup  # the tests' own imports (MBPP sanitized)
        q = text.strip() + "\nYour code should pass these tests:\n" + "\n".join(lines)
        code = rec.get(spec.solution_field or "code")
        declared = rec.get(spec.entry_point_field or "entry_point")
        tests = tuple(setup + lines)
        if not isinstance(code, str) and isinstance(declared, str) and declared.strip():
            tests = (*tests, {"entry_point": declared.strip()})  # no reference solution: the record names it (issue 36)
        return TaskRecord(q, "", tests, None, code if isinstance(code, str) else None, task, task_id)
    statement = _text(rec, where, spec.question_field, ("question", "problem", "description", "prompt"), "question")
    sols = rec.get(spec.solution_field or "solutions", rec.get("solution"))
    if isinstance(sols, str) and sols.startswith("["):
        sols = json.loads(sols)
    solution = sols[0] if isinstance(sols, list) and sols else sols if isinstance(sols, str) else None
    return TaskRecord(statement.strip(), "", _stdio_cases(rec, where, spec.tests_field), None, solution, task, task_id)


def load_records(spec: RecordFields, default_task: str) -> tuple[TaskFormat, list[TaskRecord]]:
    """Every record of a task file, converted; the format is ``spec.format``, ``records`` for a source with a verifier
    or an environment, or detected from the first record.

    Raises:
        TaskDataError: an unreadable file, an empty one, or records that cannot be used: every one listed (a record
            that does not convert, a math gold that breaks the file's own style, ``check_gold_style``), at most 20
            lines then a count; a single bad record's message as it is.
    """
    plugged = getattr(spec, "verifier", None) or getattr(spec, "environment", None)
    fmt: TaskFormat | None = spec.format or ("records" if plugged else None)
    out, golds, errors = [], [], {}
    for where, rec in read_records(spec):
        fmt = fmt or detect_format(rec, where, spec)
        try:
            out.append(to_record(rec, where, fmt, spec, default_task))
            gold = out[-1].answer
        except TaskDataError as e:
            errors[where], gold = str(e), None
        if fmt == "math" and rec.get("choices") is None:
            golds.append((where, rec.get(spec.answer_field or "answer"), gold))
    if not out and not errors:
        raise TaskDataError(f'{spec.path} holds no tasks; add lines like {{"question": "2+2?", "answer": "4"}}')
    check_gold_style(golds, spec, errors)
    return fmt or "math", out


def check_gold_style(golds: list[tuple[str, object, str | None]], spec: RecordFields, errors: dict | None = None) -> None:
    """Refuse a math file whose golds break its own style (``ratchet.loop.tasks.gold_style``) or whose records did
    not convert (``errors``: ``where`` -> message), every such record listed in file order. A gold that breaks the
    style is named for that (the root cause: no ``####``) rather than for the parse error it also gave.

    Raises:
        TaskDataError: one line per bad record (``<path>:<line>: <what was found>``), at most 20 then a count; one
            record's own error alone is raised as it is.
    """
    style = {golds[i][0]: line for i, line in gold_style_problems(golds, spec.answer_field or "answer")}
    problems = {**(errors or {}), **style}
    if not problems:
        return
    if len(problems) == 1 and not style:
        raise TaskDataError(next(iter(problems.values())))
    order = [w for w, _, _ in golds] + [w for w in problems if w not in {g[0] for g in golds}]
    lines = [problems[w] for w in dict.fromkeys(order) if w in problems]
    more = f"\n… and {len(lines) - 20} more (`ratchet tasks check {spec.path}` lists them all)" if len(lines) > 20 else ""
    what = "gold(s) are not what the file's other golds are" if not errors else "task(s) cannot be used as they are"
    raise TaskDataError(f"{spec.path}: {len(lines)} {what}; fix them:\n" + "\n".join(lines[:20]) + more)
