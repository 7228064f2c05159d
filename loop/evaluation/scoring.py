"""Scoring stored completions with the verifier their prompt's task asks for (math or code).

One function serves the verify stage, evaluation and ``ratchet reverify``, so they cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ratchet.loop.config.tasks import TaskSourceConfig
from ratchet.verifiers.reward import RewardSpec, score_batch
from ratchet.verifiers.verdict import Verdict


def outcome_verifier(task_format: str | None) -> str:
    """``math`` for math tasks (and rows stored before task formats existed), ``code`` for every code format."""
    return "math" if task_format in (None, "math") else "code"


def reward_spec(verifier: Mapping[str, Any], sources: Sequence[Mapping[str, Any]] = ()) -> RewardSpec:
    """The ``RewardSpec`` of a campaign's ``[verifier]`` section (a ``VerifierConfig`` dump, or the stored JSON of an
    older config: a missing key takes the value it had before it existed; ``format_template`` was "none") and of its
    ``[[tasks.sources]]`` (``TaskSourceConfig`` dumps: a source's own ``answer_format``)."""
    source_formats = tuple(
        (TaskSourceConfig.model_validate(dict(s)).source_name(), s["answer_format"])
        for s in sources
        if s.get("answer_format") is not None
    )
    return RewardSpec.from_mapping({"format_template": "none", **verifier, "source_formats": source_formats})


def verdict_row(trajectory_id: str, kind: str, vd: Verdict, created_at: datetime) -> dict[str, Any]:
    """A ``verdicts`` store row: ``verifier`` names the outcome verifier (``kind``), ``reward`` is the composite."""
    return dict(
        trajectory_id=trajectory_id,
        verifier=kind,
        verifier_version=vd.verifier_version,
        reward=float(vd.reward),
        correct=bool(vd.correct),
        reason=vd.reason,
        parsed=vd.parsed,
        format_ok=vd.format_ok,
        latency_s=float(vd.latency_s),
        created_at=created_at,
        read_chars=vd.read_chars,
    )


def score_items(completions: Sequence[str], prompts: Sequence[dict], spec: RewardSpec) -> list[tuple[str, Verdict]]:
    """``(outcome verifier name, composite verdict)`` per completion, in order.

    Args:
        completions: model outputs.
        prompts: one prompt row per completion with ``answer`` (and ``source``, for a source's own
            ``answer_format``) and, for code, ``task_format``, ``tests_json`` (JSON list) and ``solution``.
        spec: the reward's settings (``reward_spec`` of the campaign's ``[verifier]``).

    Returns:
        The math prompts' verdicts come from ``score_batch(kind="math")``, the others' from
        ``score_batch(kind="code", tests=...)``; the format term uses ``spec.format_template`` for math and
        ``none`` for code (a code completion is a fenced program, not an 'Answer:' line), and code runs
        under ``spec.code_budget_s``.

    Raises:
        ValueError: the two lists differ in length.
    """
    if len(completions) != len(prompts):
        raise ValueError(f"{len(completions)} completions but {len(prompts)} prompts; pass one prompt row per completion")
    kinds = [outcome_verifier(p.get("task_format")) for p in prompts]
    code_spec = spec.with_settings(format_template="none", timeout_s=spec.code_budget_s)
    out: list[tuple[str, Verdict] | None] = [None] * len(completions)
    for kind in ("math", "code"):
        idx = [i for i, k in enumerate(kinds) if k == kind]
        if not idx:
            continue
        if kind == "math":
            verdicts = score_batch(
                [completions[i] for i in idx],
                [str(prompts[i]["answer"]) for i in idx],
                kind="math",
                spec=spec,
                answer_format=[spec.format_for(prompts[i].get("source")) for i in idx],
            )
        else:
            verdicts = score_batch(
                [completions[i] for i in idx],
                [prompts[i].get("solution") for i in idx],  # reference program: fills a missing expected stdout
                kind="code",
                tests=[_declared_tests(prompts[i]) for i in idx],
                spec=code_spec,
            )
        for i, v in zip(idx, verdicts):
            out[i] = (kind, v)
    return [o for o in out if o is not None]


def _declared_tests(prompt: dict) -> list:
    """A code prompt's tests; a gold-less one stored before tests declared their entry point (an older store) gets
    ``{"entry_point": ...}`` from its ``entry_point`` column, so it is judged as a new row would be."""
    tests = json.loads(prompt.get("tests_json") or "[]")
    entry = prompt.get("entry_point")
    if prompt.get("solution") is None and entry and not any(isinstance(t, dict) for t in tests):
        tests.append({"entry_point": entry})
    return tests
