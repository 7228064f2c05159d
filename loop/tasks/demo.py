"""The task sets `ratchet demo --tasks` runs: built-in arithmetic, the shipped code tasks, or both mixed.

``data/code_tasks.jsonl`` (74 short Python functions in HumanEval format) and ``data/math_tasks.jsonl``
(300 arithmetic questions) were written for Ratchet (Apache-2.0; ``benchmarks/make_demo_tasks.py``).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

DEMO_TASKS = ("arithmetic", "code", "mixed")
DEMO_HELDOUT_PROMPTS = 400
DEMO_CONFIRMATION_PROMPTS = 200


class DemoTasksError(ValueError):
    """An unknown ``--tasks`` value; the message lists the valid ones."""


def data_path(name: str) -> Path:
    """Path of a task file shipped in ``ratchet.loop.tasks``' ``data/`` folder."""
    return Path(str(files("ratchet.loop.tasks") / "data" / name))


def demo_overrides(tasks: str) -> dict:
    """Config overrides (dotted keys) of the demo campaign for ``tasks``; the campaign name says which set it runs.

    Code completions need room for a whole function (``max_new_tokens`` 96 instead of 32); the mixed demo takes
    60% math and 40% code prompts per round (a common RLVR mix) and evaluates 24 prompts of each.

    Raises:
        DemoTasksError: ``tasks`` is not one of ``DEMO_TASKS``.
    """
    if tasks not in DEMO_TASKS:
        raise DemoTasksError(f"--tasks {tasks!r} is not one of {', '.join(DEMO_TASKS)}")
    if tasks == "arithmetic":
        # 400 held-out prompts: the gate's non-inferiority bound needs ~180 to hold a 5-point drop to <= 5% and pass
        # a 5-point gain 80% of the time (`ratchet gate plan --eval-prompts 48` vs 400); evaluating them takes ~1 min.
        # 200 more as the confirmation set, read only on promotion: the promoted checkpoint's unbiased pass@1
        # (docs/gate.md); one greedy evaluation of 200 prompts per promotion (measured in docs/gate.md)
        return {"tasks.heldout_prompts": DEMO_HELDOUT_PROMPTS, "gate.confirmation_prompts": DEMO_CONFIRMATION_PROMPTS}
    code = {"path": str(data_path("code_tasks.jsonl")), "name": "code", "format": "humaneval", "fewshot": 1}
    math = {"path": str(data_path("math_tasks.jsonl")), "name": "math", "format": "math", "fewshot": 2}
    if tasks == "code":
        return {
            "tasks.sources": [code],
            "tasks.heldout_fraction": 0.3,
            "tasks.heldout_prompts": 16,
            "tasks.train_prompts_per_round": 32,
            "generation.max_new_tokens": 96,
        }
    return {
        "tasks.sources": [{**math, "weight": 0.6}, {**code, "weight": 0.4}],
        "tasks.heldout_fraction": 0.3,
        "tasks.train_prompts_per_round": 40,
        "generation.max_new_tokens": 96,
        "evals": [{"name": "math", "source": "math", "prompts": 24}, {"name": "code", "source": "code", "prompts": 16}],
    }
