"""Scoring stored completions with the verifier their prompt's task asks for (math or code).

One function serves the verify stage, evaluation and ``ratchet reverify``, so they cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ratchet.verifiers.reward import score_batch
from ratchet.verifiers.verdict import Verdict


def outcome_verifier(task_format: str | None) -> str:
    """``math`` for math tasks (and rows stored before task formats existed), ``code`` for every code format."""
    return "math" if task_format in (None, "math") else "code"


def scoring_settings(verifier: Mapping[str, Any]) -> dict[str, Any]:
    """``score_items`` keyword arguments from a campaign's ``[verifier]`` section (a ``VerifierConfig`` dump, or the
    stored JSON of an older config: a missing key takes the default it had before it existed)."""
    return dict(
        format_template=verifier.get("format_template", "none"),
        format_weight=verifier.get("format_weight", 0.1),
        timeout_s=verifier.get("timeout_s", 2.0),
        format_prefix=verifier.get("format_prefix", ""),
        language_weight=verifier.get("language_weight", 0.0),
        target_language=verifier.get("target_language", "none"),
        code_isolation=verifier.get("code_isolation"),
    )


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
    )


def score_items(
    completions: Sequence[str],
    prompts: Sequence[dict],
    *,
    format_template: str,
    format_weight: float,
    timeout_s: float,
    code_timeout_s: float | None = None,
    format_prefix: str = "",
    language_weight: float = 0.0,
    target_language: str = "none",
    code_isolation: str | None = None,
) -> list[tuple[str, Verdict]]:
    """``(outcome verifier name, composite verdict)`` per completion, in order.

    Args:
        completions: model outputs.
        prompts: one prompt row per completion with ``answer`` and, for code, ``task_format``,
            ``tests_json`` (JSON list) and ``solution``.
        timeout_s: per-item limit of the math verifier's sympy stage, seconds.
        code_timeout_s: per-run limit of the code sandbox, seconds (default: ``max(timeout_s, 5)``).
        format_prefix: text the chat template pre-fills at the start of every generation (``verifier.format_prefix``).
        language_weight, target_language: the language-consistency reward term (``verifiers.language``).
        code_isolation: the code sandbox's mode (``verifier.code_isolation``).

    Returns:
        The math prompts' verdicts come from ``score_batch(kind="math")``, the others' from
        ``score_batch(kind="code", tests=...)``; the format term uses ``format_template`` for math and
        ``none`` for code (a code completion is a fenced program, not an 'Answer:' line).
    """
    if len(completions) != len(prompts):
        raise ValueError(f"{len(completions)} completions but {len(prompts)} prompts; pass one prompt row per completion")
    kinds = [outcome_verifier(p.get("task_format")) for p in prompts]
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
                format_template=format_template,
                format_weight=format_weight,
                timeout_s=timeout_s,
                format_prefix=format_prefix,
                language_weight=language_weight,
                target_language=target_language,
            )
        else:
            verdicts = score_batch(
                [completions[i] for i in idx],
                [prompts[i].get("solution") for i in idx],  # reference program: fills a missing expected stdout
                kind="code",
                format_template="none",
                format_weight=format_weight,
                timeout_s=code_timeout_s or max(timeout_s, 5.0),
                tests=[json.loads(prompts[i]["tests_json"] or "[]") for i in idx],
                isolation=code_isolation,
            )
        for i, v in zip(idx, verdicts):
            out[i] = (kind, v)
    return [o for o in out if o is not None]
