"""Task sources: prompts whose answers a program can check, and the fixed held-out split.

A prompt's id is a hash of its source and content; its split is a hash of its whitespace/case-normalized
question (never of the answer), so the same question always lands in the same split whichever source,
file, round or answer formatting it comes with: a held-out question can never become training data.
Round ``r`` draws its training prompts with seed ``(seed, r)``; the held-out set depends only on ``seed``
(and is pinned in the store when a campaign starts, see ``flows/rounds/campaign.py``).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

import sympy

from ratchet.loop.tasks.formats import TaskDataError

Split = Literal["train", "heldout"]


@dataclass(frozen=True)
class Prompt:
    """One verifiable problem.

    Attributes:
        prompt_id: 16 hex digits, sha256 of ``source``, ``question`` and ``answer`` (code: the tests).
        source: where it came from (``arithmetic``, a ``[[tasks.sources]]`` name (stores made before
            the fold of ``tasks.source = "jsonl"`` also hold ``jsonl:<file name>``),
            ``eval:<name>`` for an ``[[evals]]`` file).
        task: task family used for per-task metrics (``sum_small``, ``gsm8k``, ...).
        question: the user-facing text.
        answer: the math gold as text (checked by ``verifiers.math``); ``""`` for code tasks.
        split: ``train`` or ``heldout``, a function of the normalized question only (``split_of``).
        task_format: ``math``, ``humaneval``, ``mbpp``, ``stdio`` or ``records``; decides the outcome verifier.
        tests_json: code tests as JSON (a list the code verifier reads), None for math.
        entry_point: function under test (humaneval), else None.
        solution: reference solution (a whole program for code), else None.
        question_key: sha256 of the normalized question (16 hex digits): decontamination joins on it.
        record_json: the whole task record as JSON (``records`` format: what the source's verifier and environment
            are given; its ``prompt`` may be a chat-message list), else None.
    """

    prompt_id: str
    source: str
    task: str
    question: str
    answer: str
    split: Split
    task_format: str = "math"
    tests_json: str | None = None
    entry_point: str | None = None
    solution: str | None = None
    question_key: str | None = None
    record_json: str | None = None

    @property
    def verifier(self) -> Literal["math", "code", "plugin"]:
        """The outcome verifier of this prompt's format."""
        return "math" if self.task_format == "math" else "plugin" if self.task_format == "records" else "code"

    @property
    def tests(self) -> list | None:
        return None if self.tests_json is None else json.loads(self.tests_json)


def make_prompt_id(source: str, question: str, answer: str) -> str:
    return hashlib.sha256(f"{source}\x1f{question}\x1f{answer}".encode()).hexdigest()[:16]


def normalize_question(question: str) -> str:
    """Whitespace runs collapsed to one space, ends stripped, lowercased: the text the split and decontamination use."""
    return " ".join(question.split()).lower()


def question_key(question: str) -> str:
    return hashlib.sha256(normalize_question(question).encode()).hexdigest()[:16]


def split_of(question: str, heldout_fraction: float) -> Split:
    """Deterministic split: ``heldout`` iff sha256("split:" + normalized question) falls in the first ``heldout_fraction``.

    The answer, the source and the file play no part, so records that differ only in answer formatting
    (``42`` / ``42.0``) or appear in two files always land on the same side.
    """
    bucket = int(hashlib.sha256(f"split:{normalize_question(question)}".encode()).hexdigest()[:8], 16) / 0x1_0000_0000
    return "heldout" if bucket < heldout_fraction else "train"


def make_prompt(
    source: str,
    task: str,
    question: str,
    answer: str,
    heldout_fraction: float,
    *,
    task_format: str = "math",
    tests: tuple | list | None = None,
    entry_point: str | None = None,
    solution: str | None = None,
    split: Split | None = None,
    record_json: str | None = None,
) -> Prompt:
    """A Prompt with its id (``record_json`` is part of it), split (by question unless given) and question key."""
    tests_json = None if tests is None else json.dumps(list(tests))
    content = answer if tests_json is None else f"{answer}\x1e{tests_json}"
    pid = make_prompt_id(source, question, content if record_json is None else f"{content}\x1d{record_json}")
    return Prompt(
        pid,
        source,
        task,
        question,
        answer,
        split or split_of(question, heldout_fraction),
        task_format,
        tests_json,
        entry_point,
        solution,
        question_key(question),
        record_json,
    )


def _prompt(source: str, task: str, question: str, answer: str, heldout_fraction: float, solution: str | None = None) -> Prompt:
    return make_prompt(source, task, question, answer, heldout_fraction, solution=solution)


def _worked(level: str, expr: str, gold: str) -> str:
    """A worked solution in the few-shot examples' style (the reference a cold-start sft phase trains on)."""
    if level == "linear_equation":
        return f"x = {gold}\nAnswer: {gold}"
    return f"{expr} = {gold}\nAnswer: {gold}"


class TaskSource(Protocol):
    """Anything that yields prompts; ``draw`` must be deterministic in its seed."""

    name: str

    def draw(self, n: int, split: Split, seed: int) -> list[Prompt]: ...

    def fewshot(self, k: int) -> list[tuple[str, str]]: ...


# --- built-in arithmetic ------------------------------------------------------------------------


def _gen_sum_small(rng: random.Random) -> str:
    return f"{rng.randint(1, 20)} + {rng.randint(1, 20)}"


def _gen_sum_2digit(rng: random.Random) -> str:
    return f"{rng.randint(10, 99)} + {rng.randint(10, 99)}"


def _gen_product_1digit(rng: random.Random) -> str:
    return f"{rng.randint(2, 9)} * {rng.randint(2, 9)}"


def _gen_multi_step(rng: random.Random) -> str:
    a, b, c = rng.randint(1, 20), rng.randint(2, 9), rng.randint(2, 9)
    return rng.choice([f"{a} + {b} * {c}", f"({a} + {b}) * {c}", f"{a} * {b} - {c}"])


def _gen_linear_equation(rng: random.Random) -> str:
    a, x, b = rng.randint(2, 9), rng.randint(-10, 10), rng.randint(-20, 20)
    return f"{a}*x + {b} = {a * x + b}"


_GENERATORS = {
    "sum_small": _gen_sum_small,
    "sum_2digit": _gen_sum_2digit,
    "product_1digit": _gen_product_1digit,
    "multi_step": _gen_multi_step,
    "linear_equation": _gen_linear_equation,
}
ARITHMETIC_LEVELS = tuple(_GENERATORS)


def _gold(level: str, expr: str) -> str:
    """Gold answer computed by sympy from the expression text we generated (never model text)."""
    if level == "linear_equation":
        lhs, rhs = expr.split("=")
        x = sympy.Symbol("x")
        (sol,) = sympy.solve(sympy.Eq(sympy.sympify(lhs), sympy.sympify(rhs)), x)
        return str(sol)
    return str(sympy.sympify(expr))


def _question(level: str, expr: str) -> str:
    if level == "linear_equation":
        return f"Solve for x: {expr.replace('*x', 'x').replace('+ -', '- ')}"
    return f"What is {expr}?"


class ArithmeticTasks:
    """Seeded arithmetic problems at several difficulty levels; sympy computes the gold answers."""

    name = "arithmetic"

    def __init__(self, levels: tuple[str, ...], heldout_fraction: float = 0.2) -> None:
        unknown = [lv for lv in levels if lv not in _GENERATORS]
        if unknown or not levels:
            raise TaskDataError(f"unknown arithmetic levels {unknown or levels!r}; choose from {list(_GENERATORS)}")
        self.levels = tuple(levels)
        self.heldout_fraction = heldout_fraction

    def _stream(self, seed: int) -> Iterator[tuple[str, str, str]]:
        rng = random.Random(seed)
        while True:
            level = self.levels[rng.randrange(len(self.levels))]
            expr = _GENERATORS[level](rng)
            yield level, expr, _question(level, expr)

    def draw(self, n: int, split: Split, seed: int) -> list[Prompt]:
        """``n`` distinct prompts of ``split``, deterministic in ``seed``.

        Raises:
            TaskDataError: 20,000 draws in a row brought no new question (the levels hold fewer than ``n``).
        """
        out: dict[str, Prompt] = {}
        shown = {q for q, _ in self.fewshot(8)}  # a worked example is never also a question
        misses = 0
        for level, expr, q in self._stream(seed):
            if q in shown or q in out or split_of(q, self.heldout_fraction) != split:
                misses += 1
                if misses > 20_000:
                    raise TaskDataError(
                        f"the arithmetic levels {list(self.levels)} hold only {len(out)} distinct {split} questions, "
                        f"{n} were asked for; lower the count (tasks.heldout_prompts / train_prompts_per_round) or add levels"
                    )
                continue
            misses = 0
            gold = _gold(level, expr)
            out[q] = _prompt(self.name, level, q, gold, self.heldout_fraction, _worked(level, expr, gold))
            if len(out) == n:
                break
        return list(out.values())

    def fewshot(self, k: int) -> list[tuple[str, str]]:
        # Fixed worked examples; ``draw`` never returns these questions.
        shots = [
            ("What is 3 + 5?", "3 + 5 = 8\nAnswer: 8"),
            ("What is 6 * 7?", "6 * 7 = 42\nAnswer: 42"),
            ("What is 120 + 35?", "120 + 35 = 155\nAnswer: 155"),
            ("Solve for x: 2x + 1 = 7", "2x = 7 - 1 = 6, x = 6 / 2 = 3\nAnswer: 3"),
        ]
        return shots[:k]


# --- task files ----------------------------------------------------------------------------------


def gold_conflicts(prompts: list[Prompt]) -> list[tuple[Prompt, str, str]]:
    """Math prompts whose question appeared earlier with a gold the math verifier does not judge equal:
    ``(the later prompt, the first gold, its gold)`` per conflict, in file order."""
    from ratchet.verifiers.math import verify_math_batch

    first: dict[str, Prompt] = {}
    pairs: list[tuple[Prompt, str, str]] = []
    for p in prompts:
        if p.task_format != "math":
            continue
        f = first.setdefault(p.question_key or "", p)
        if f is not p and p.answer != f.answer:
            pairs.append((p, f.answer, p.answer))
    if not pairs:
        return []
    verdicts = verify_math_batch([(a, f"Answer: {b}") for _, a, b in pairs], timeout_s=5.0)
    return [pair for pair, v in zip(pairs, verdicts) if not v.correct]


def gold_conflict_message(q: str, a: str, b: str) -> str:
    return f"the question {q[:60]!r} appears with two different golds ({a!r} and {b!r}); keep one record per question or fix the wrong gold"


def _check_golds(prompts: list[Prompt], where: str) -> None:
    """A question given with two golds the math verifier does not judge equal is a task-data error.

    Raises:
        TaskDataError: naming the question, both golds and the fix.
    """
    for p, a, b in gold_conflicts(prompts)[:1]:
        raise TaskDataError(f"{where}: {gold_conflict_message(p.question, a, b)}")


class FileTasks:
    """Prompts from a task file of any format (``ratchet.loop.tasks.formats``), one per normalized question
    (``records``: one per distinct record).

    Records that repeat a question (same gold by the math verifier) are kept once, the first; a
    repeated question with a different gold raises ``TaskDataError``.
    """

    def __init__(self, spec, name: str, heldout_fraction: float = 0.2, *, split: Split | None = None) -> None:
        from ratchet.loop.tasks.formats import load_records

        self.spec, self.name, self.heldout_fraction = spec, name, heldout_fraction
        self.path = spec.path
        self.format, records = load_records(spec, default_task=name.split(":")[-1])
        self.task_ids: dict[str, str] = {}
        all_prompts = []
        for r in records:
            p = make_prompt(
                name,
                r.task,
                r.question,
                r.answer,
                heldout_fraction,
                task_format=self.format,
                tests=r.tests,
                entry_point=r.entry_point,
                solution=r.solution,
                split=split,
                record_json=r.record_json,
            )
            all_prompts.append(p)
            self.task_ids.setdefault(p.prompt_id, r.task_id)
        _check_golds(all_prompts, str(spec.path))
        seen: dict[str, Prompt] = {}
        for p in all_prompts:  # a records prompt is one per record (two chats may end in the same user turn)
            seen.setdefault(p.prompt_id if p.record_json is not None else p.question_key or "", p)
        self.prompts = list(seen.values())

    def draw(self, n: int, split: Split, seed: int) -> list[Prompt]:
        """Up to ``n`` prompts of ``split`` (fewer when the file holds fewer; callers check the count)."""
        shown = {q for q, _ in self.fewshot(8)}
        pool = [p for p in self.prompts if p.split == split and p.question not in shown]
        rng = random.Random(seed)
        return rng.sample(pool, min(n, len(pool)))

    def fewshot(self, k: int) -> list[tuple[str, str]]:
        """The first ``k`` train-split tasks with a known answer (code: its reference solution) as worked examples."""
        if k <= 0:
            return []
        shots = []
        for p in self.prompts:
            if p.split != "train":
                continue
            if p.task_format == "math":
                shots.append((p.question, f"Answer: {p.answer}"))
            elif p.solution:
                shots.append((p.question, f"```python\n{p.solution.strip()}\n```"))
            if len(shots) == k:
                break
        return shots


def make_task_source(source: str, *, levels: tuple[str, ...] = (), heldout_fraction: float = 0.2) -> TaskSource:
    """The single ``tasks.source`` (``arithmetic``; a file is a ``[[tasks.sources]]`` entry, ``FileTasks``)."""
    if source == "arithmetic":
        return ArithmeticTasks(levels, heldout_fraction)
    raise TaskDataError(
        f"unknown task source {source!r}; use 'arithmetic' or list task files under [[tasks.sources]] path = '...'"
    )


def chat_messages(system_prompt: str, shots: list[tuple[str, str]], question: str) -> list[dict[str, str]]:
    """The chat a prompt is rendered as: system, few-shot turns, then the question."""
    msgs = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for q, a in shots:
        msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return msgs + [{"role": "user", "content": question}]
