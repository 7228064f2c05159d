"""Scoring stored completions with the verifier their prompt's task asks for (math, code, or a records source's own).

One function serves the verify stage, evaluation and ``ratchet reverify``, so they cannot disagree.

A campaign's verifier version (``reward_version``) is the composite verifier's ``VERSION``, followed, when a source
names its own verifier, by every such verifier's identity (``+plugins[plugin:<ref>=<declared>+<sha16>,...]``). Every
verdict the campaign writes carries it, so an edited plugin file is a new version for the whole campaign: ``ratchet
reverify`` re-scores its trajectories and the gate re-verifies its incumbent's evaluation (a new eval set id), as on
any verifier change.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from ratchet.loop.config.tasks import TaskSourceConfig
from ratchet.loop.evaluation.episode_scoring import environment_judges, episode_verdicts, prompt_record
from ratchet.verifiers.plugins.runner import PluginVerifier, resolve_verifier, verify_plugin_batch
from ratchet.verifiers.reward import VERSION, VERSIONS, RewardSpec, score_batch
from ratchet.verifiers.verdict import Verdict

log = logging.getLogger(__name__)


def outcome_verifier(task_format: str | None) -> str:
    """``math`` for math tasks (and rows stored before task formats existed), ``plugin`` for ``records`` (the source's
    own verifier), ``code`` for every code format."""
    return "math" if task_format in (None, "math") else "plugin" if task_format == "records" else "code"


def source_verifiers(spec: RewardSpec) -> dict[str, PluginVerifier]:
    """Each source's own verifier, imported here (``ratchet.verifiers.plugins.runner.resolve_verifier``).

    Raises:
        PluginError: a verifier cannot be imported (the message names it and says why).
    """
    return {src: resolve_verifier(ref, base_dir=folder, sandbox=sb) for src, ref, folder, sb in spec.source_verifiers}


def reward_version(spec: RewardSpec, verifiers: Mapping[str, PluginVerifier] | None = None) -> str:
    """The campaign's verifier version (module docstring): ``VERSION`` without plugins.

    Raises:
        PluginError: a source's verifier cannot be imported.
    """
    found = source_verifiers(spec) if verifiers is None else verifiers
    judges = environment_judges(spec)  # environments that score their episodes: part of the version too
    if not found and not judges:
        return VERSION
    ids = sorted({f"{v.name}={v.version}" for v in found.values()} | {f"{p.name}={p.version}" for p in judges.values()})
    return f"{VERSION}+plugins[{','.join(ids)}]"


def verifier_versions(spec: RewardSpec) -> dict[str, str]:
    """Every verifier's own version, as a round's manifest records them: the built-ins' (``VERSIONS``), each source's
    own verifier's (``plugin:<ref>``: ``<declared>+<sha16>``) and, with those, the campaign's (``campaign``:
    ``reward_version``).

    Raises:
        PluginError: a source's verifier cannot be imported.
    """
    found = source_verifiers(spec)
    own = {v.name: v.version for v in found.values()} | {p.name: p.version for p in environment_judges(spec).values()}
    return {**VERSIONS, **own, "campaign": reward_version(spec, found)} if own else dict(VERSIONS)


def reward_spec(verifier: Mapping[str, Any], sources: Sequence[Mapping[str, Any]] = ()) -> RewardSpec:
    """The ``RewardSpec`` of a campaign's ``[verifier]`` section (a ``VerifierConfig`` dump, or the stored JSON of an
    older config: a missing key takes the value it had before it existed; ``format_template`` was "none") and of its
    ``[[tasks.sources]]`` (``TaskSourceConfig`` dumps: a source's own ``answer_format``)."""
    source_formats = tuple(
        (TaskSourceConfig.model_validate(dict(s)).source_name(), s["answer_format"])
        for s in sources
        if s.get("answer_format") is not None
    )
    plugged = tuple(
        (TaskSourceConfig.model_validate(dict(s)).source_name(), s["verifier"], s.get("plugin_dir"), bool(s.get("sandbox")))
        for s in sources
        if s.get("verifier")
    )
    envs = tuple(  # a multi-turn environment: its score(), when it has one, judges the source's episodes
        (TaskSourceConfig.model_validate(dict(s)).source_name(), s["environment"], s.get("plugin_dir") or _folder(s))
        for s in sources
        if s.get("environment")
    )
    settings = {"format_template": "none", **verifier, "source_formats": source_formats, "source_verifiers": plugged}
    settings["source_environments"] = envs
    return RewardSpec.from_mapping(settings)


def _folder(source: Mapping[str, Any]) -> str | None:
    """A source's task file's folder (where a 'module:Class' environment is imported from without a plugin_dir)."""
    return str(Path(source["path"]).parent) if source.get("path") else None


def config_version(config: Mapping[str, Any]) -> str:
    """The current verifier version of a stored campaign config (a ``RatchetConfig`` dump): ``reward_version``.

    Raises:
        PluginError: a source's verifier cannot be imported.
    """
    return reward_version(reward_spec(config.get("verifier", {}), (config.get("tasks") or {}).get("sources") or ()))


def verdict_row(trajectory_id: str, kind: str, vd: Verdict, created_at: datetime) -> dict[str, Any]:
    """A ``verdicts`` store row: ``verifier`` names the outcome verifier (``kind``: ``math``, ``code`` or
    ``plugin:<ref>``), ``reward`` is the composite (a plugin's verdict as it is)."""
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


def score_items(
    completions: Sequence[str],
    prompts: Sequence[dict],
    spec: RewardSpec,
    episodes: Sequence[list[dict] | None] | None = None,
) -> list[tuple[str, Verdict]]:
    """``(outcome verifier name, composite verdict)`` per completion, in order.

    Args:
        completions: model outputs (a multi-turn episode: its final assistant message).
        prompts: one prompt row per completion with ``answer`` (and ``source``, for a source's own
            ``answer_format`` or verifier) and, for code, ``task_format``, ``tests_json`` (JSON list) and ``solution``;
            for ``records``, ``record_json`` (the task record the verifier is given).
        spec: the reward's settings (``reward_spec`` of the campaign's ``[verifier]`` and sources).
        episodes: per completion, its whole multi-turn episode (``episode_scoring.stored_episode``) or None; an episode
            of a source whose environment has ``score`` is judged by it (``episode_scoring.episode_verdicts``, named
            ``plugin:<ref>``), every other completion as below.

    Returns:
        The math prompts' verdicts come from ``score_batch(kind="math")``, the code prompts' from
        ``score_batch(kind="code", tests=...)``; the format term uses ``spec.format_template`` for math and
        ``none`` for code (a code completion is a fenced program, not an 'Answer:' line), and code runs
        under ``spec.code_budget_s``. A ``records`` prompt's verdict is its source's verifier's, named
        ``plugin:<ref>`` (``ratchet.verifiers.plugins.runner``; no format term; ``spec.code_budget_s`` per call;
        a failure is a ``verifier_error`` verdict). Every verdict carries ``reward_version(spec)``.

    Raises:
        ValueError: the two lists differ in length, or a ``records`` prompt's source names no verifier.
        PluginError: a source's verifier cannot be imported.
    """
    if len(completions) != len(prompts):
        raise ValueError(f"{len(completions)} completions but {len(prompts)} prompts; pass one prompt row per completion")
    kinds = [outcome_verifier(p.get("task_format")) for p in prompts]
    plugins = source_verifiers(spec)
    version = reward_version(spec, plugins)
    judges = environment_judges(spec)
    for i, ep in enumerate(episodes or ()):
        if ep is not None and str(prompts[i].get("source")) in judges:
            kinds[i] = "environment"
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
            out[i] = (kind, v if version == VERSION else replace(v, verifier_version=version))
    for source in dict.fromkeys(str(prompts[i].get("source")) for i, k in enumerate(kinds) if k == "plugin"):
        idx = [i for i, k in enumerate(kinds) if k == "plugin" and str(prompts[i].get("source")) == source]
        if source not in plugins:
            raise ValueError(
                f"{len(idx)} records prompt(s) of source {source!r}, which names no verifier; set verifier = "
                "'package.module:function' on that [[tasks.sources]] entry"
            )
        v = plugins[source]
        items = [(completions[i], prompts[i].get("record_json")) for i in idx]
        verdicts = verify_plugin_batch(v, items, timeout_s=spec.code_budget_s)
        errors = [vd for vd in verdicts if vd.reason == "verifier_error"]
        if errors:  # the store keeps the reason; the message is logged (first of the batch)
            log.info(
                "verifier %s of source %r failed on %d/%d completions (verifier_error; first: %s)",
                v.name, source, len(errors), len(verdicts), str(errors[0].details.get("error"))[:200],
            )  # fmt: skip
        for i, vd in zip(idx, verdicts):
            out[i] = (v.name, replace(vd, verifier_version=version))
    for source, env in judges.items():
        idx = [i for i, k in enumerate(kinds) if k == "environment" and str(prompts[i].get("source")) == source]
        items = [(episodes[i], prompt_record(prompts[i])) for i in idx]
        for i, vd in zip(idx, episode_verdicts(env.obj, env.name, items, version) if idx else ()):
            out[i] = (env.name, vd)
    return [o for o in out if o is not None]


def _declared_tests(prompt: dict) -> list:
    """A code prompt's tests; a gold-less one stored before tests declared their entry point (an older store) gets
    ``{"entry_point": ...}`` from its ``entry_point`` column, so it is judged as a new row would be."""
    tests = json.loads(prompt.get("tests_json") or "[]")
    entry = prompt.get("entry_point")
    if prompt.get("solution") is None and entry and not any(isinstance(t, dict) for t in tests):
        tests.append({"entry_point": entry})
    return tests
