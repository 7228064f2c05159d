"""Task sources: prompts whose answers a program can check, and the fixed held-out split.

A prompt's id is a hash of its source and content, and its split is a hash of that id, so the same
question always lands in the same split whichever round or generator drew it: a held-out question
can never become training data. Round ``r`` draws its training prompts with seed ``(seed, r)``; the
held-out set depends only on ``seed``.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import sympy

Split = Literal["train", "heldout"]


class TaskDataError(ValueError):
    """A task file or record is malformed; the message names the line and the fix."""


@dataclass(frozen=True)
class Prompt:
    """One verifiable problem.

    Attributes:
        prompt_id: 16 hex digits, sha256 of ``source``, ``question`` and ``answer``.
        source: where it came from (``arithmetic`` or ``jsonl:<file name>``).
        task: task family used for per-task metrics (``sum_small``, ``gsm8k``, ...).
        question: the user-facing text.
        answer: the gold answer as text (checked by ``verifiers.math``).
        split: ``train`` or ``heldout``, a function of ``prompt_id`` only.
    """

    prompt_id: str
    source: str
    task: str
    question: str
    answer: str
    split: Split


def make_prompt_id(source: str, question: str, answer: str) -> str:
    return hashlib.sha256(f"{source}\x1f{question}\x1f{answer}".encode()).hexdigest()[:16]


def split_of(prompt_id: str, heldout_fraction: float) -> Split:
    """Deterministic split: ``heldout`` iff sha256("split:" + id) falls in the first ``heldout_fraction``."""
    bucket = int(hashlib.sha256(f"split:{prompt_id}".encode()).hexdigest()[:8], 16) / 0x1_0000_0000
    return "heldout" if bucket < heldout_fraction else "train"


def _prompt(source: str, task: str, question: str, answer: str, heldout_fraction: float) -> Prompt:
    pid = make_prompt_id(source, question, answer)
    return Prompt(pid, source, task, question, answer, split_of(pid, heldout_fraction))


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

    def _stream(self, seed: int) -> Iterator[Prompt]:
        rng = random.Random(seed)
        while True:
            level = self.levels[rng.randrange(len(self.levels))]
            expr = _GENERATORS[level](rng)
            yield _prompt(self.name, level, _question(level, expr), _gold(level, expr), self.heldout_fraction)

    def draw(self, n: int, split: Split, seed: int) -> list[Prompt]:
        """``n`` distinct prompts of ``split``, deterministic in ``seed``."""
        out: dict[str, Prompt] = {}
        shown = {q for q, _ in self.fewshot(8)}  # a worked example is never also a question
        for i, p in enumerate(self._stream(seed)):
            if p.split == split and p.prompt_id not in out and p.question not in shown:
                out[p.prompt_id] = p
                if len(out) == n:
                    break
            if i > 200 * n + 10_000:
                raise TaskDataError(f"could only draw {len(out)} distinct {split} prompts of {n}; add levels or lower the count")
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


# --- JSONL files --------------------------------------------------------------------------------


def parse_gold(record: dict, lineno: int, path: Path) -> str:
    """Gold answer of a JSONL record: ``answer`` as is, or the text after GSM8K's ``####``.

    Raises:
        TaskDataError: no answer, or an empty one.
    """
    ans = record.get("answer")
    if ans is None or (isinstance(ans, str) and not ans.strip()):
        raise TaskDataError(f'{path}:{lineno}: missing gold answer; every line needs a non-empty "answer" (or "... #### 42")')
    ans = str(ans)
    if "####" in ans:
        ans = ans.rsplit("####", 1)[1]
        if not ans.strip():
            raise TaskDataError(f"{path}:{lineno}: nothing after '####'; put the final answer after it, e.g. '#### 42'")
    return ans.strip().replace(",", "") if ans.strip().replace(",", "").lstrip("-").isdigit() else ans.strip()


class JsonlTasks:
    """Prompts from a JSONL file of ``{"question": ..., "answer": ...}`` (GSM8K ``#### 42`` accepted)."""

    def __init__(self, path: str | Path, heldout_fraction: float = 0.2) -> None:
        self.path = Path(path)
        self.name = f"jsonl:{self.path.name}"
        self.heldout_fraction = heldout_fraction
        self.prompts = self._load()

    def _load(self) -> list[Prompt]:
        if not self.path.is_file():
            raise TaskDataError(f"task file {self.path} does not exist; set tasks.path to a JSONL file")
        out: dict[str, Prompt] = {}
        for lineno, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise TaskDataError(
                    f"{self.path}:{lineno}: not valid JSON ({e.msg}); each line must be one JSON object"
                ) from None
            if not isinstance(rec, dict):
                raise TaskDataError(f'{self.path}:{lineno}: expected a JSON object with "question" and "answer"')
            q = rec.get("question") or rec.get("problem") or rec.get("prompt")
            if not isinstance(q, str) or not q.strip():
                raise TaskDataError(f'{self.path}:{lineno}: missing "question"; every line needs a non-empty question')
            task = str(rec.get("task", self.path.stem))
            p = _prompt(self.name, task, q.strip(), parse_gold(rec, lineno, self.path), self.heldout_fraction)
            out.setdefault(p.prompt_id, p)
        if not out:
            raise TaskDataError(f'{self.path} holds no tasks; add lines like {{"question": "2+2?", "answer": "4"}}')
        return list(out.values())

    def draw(self, n: int, split: Split, seed: int) -> list[Prompt]:
        pool = [p for p in self.prompts if p.split == split]
        if not pool:
            raise TaskDataError(f"{self.path} has no {split} prompts (held-out share by hash); add more tasks")
        rng = random.Random(seed)
        return rng.sample(pool, min(n, len(pool)))

    def fewshot(self, k: int) -> list[tuple[str, str]]:
        return []


def make_task_source(
    source: str, *, levels: tuple[str, ...] = (), path: str | None = None, heldout_fraction: float = 0.2
) -> TaskSource:
    if source == "arithmetic":
        return ArithmeticTasks(levels, heldout_fraction)
    if source == "jsonl":
        if not path:
            raise TaskDataError("tasks.source = 'jsonl' needs tasks.path")
        return JsonlTasks(path, heldout_fraction)
    raise TaskDataError(f"unknown task source {source!r}; choose 'arithmetic' or 'jsonl'")


def chat_messages(system_prompt: str, shots: list[tuple[str, str]], question: str) -> list[dict[str, str]]:
    """The chat a prompt is rendered as: system, few-shot turns, then the question."""
    msgs = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for q, a in shots:
        msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return msgs + [{"role": "user", "content": question}]
